"""The one registry of kinds: every module of this package that defines ``SPEC`` (a `KindSpec`),
found by listing the package (and a room's modules: a fat kind's package, or a family's), one per
contract kind. Everything that needs a kind's list reads it
here: the dispatch, the handlers and the command line (which rule takes an event, which function
and use case run it), the drain workflow's rounds (a kind's hooks), the CDK stack (its rules and
switches), `doctor` (the switches) and the docs tests (every kind documented).

Adding a kind is its name in `domain.notice.Kind`, its spec here, and its source model (or its part
of a scan or a reconcile): nothing else (docs/architecture.md, "Kinds").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence

from gpuwarden import kinds as _package
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Policy, with_sections
from gpuwarden.kinds.spec import KarpenterReason, KindSpec, Route, Unrouted
from gpuwarden.services.doctor.facts import KindCheck
from gpuwarden.sources.rules import DEFAULT_ALARM_PREFIX, Rule

#: The modules of the package that are not kinds: they read the registry, or define what a spec is.
_NOT_KINDS = frozenset({"registry", "inputs", "spec"})


def _specs_in(info: pkgutil.ModuleInfo) -> list[tuple[str, KindSpec]]:
    """A thin kind's module, or a fat kind's room (a package whose ``__init__`` holds its SPEC), or
    the room of a family of kinds (a package whose modules hold one SPEC each)."""
    module = importlib.import_module(f"{_package.__name__}.{info.name}")
    spec = getattr(module, "SPEC", None)
    if isinstance(spec, KindSpec):
        return [(module.__name__, spec)]
    if info.ispkg:
        inner = [importlib.import_module(f"{module.__name__}.{m.name}") for m in pkgutil.iter_modules(module.__path__)]
        family = [(m.__name__, s) for m in inner if isinstance(s := getattr(m, "SPEC", None), KindSpec)]
        if family:
            return family
    raise TypeError(f"{module.__name__} defines no SPEC (a KindSpec)")


def _discover() -> tuple[KindSpec, ...]:
    found: dict[Kind, KindSpec] = {}
    for module_info in pkgutil.iter_modules(_package.__path__):
        if module_info.name in _NOT_KINDS:
            continue
        for name, spec in _specs_in(module_info):
            if spec.kind in found:
                raise TypeError(f"kind {spec.kind.value} has two specs: {name} and another")
            found[spec.kind] = spec
    missing = [k.value for k in Kind if k not in found]
    if missing:
        raise TypeError(f"kinds without a spec in gpuwarden/kinds/: {', '.join(missing)}")
    return tuple(found[k] for k in Kind)


#: Every kind's spec, in the contract's order (`Kind`).
SPECS: tuple[KindSpec, ...] = _discover()
_BY_KIND = {spec.kind: spec for spec in SPECS}

#: The voluntary kinds, by value (what `Deps.voluntary_kinds` holds).
VOLUNTARY: frozenset[str] = frozenset(spec.kind.value for spec in SPECS if spec.voluntary)

#: The Karpenter reason each kind that names one counts as under a NodePool's budgets (what
#: `Deps.karpenter_reasons` holds).
KARPENTER_REASONS: dict[str, KarpenterReason] = {
    spec.kind.value: spec.karpenter_reason for spec in SPECS if spec.karpenter_reason is not None
}

#: The kind of every EventBridge detail-type gpuwarden takes (an ignored event still reports one).
KIND_OF: dict[str, Kind] = {detail_type: spec.kind for spec in SPECS for detail_type in spec.detail_types}

#: The spec that runs each Scheduler tick action.
_TICKS: dict[str, KindSpec] = {action: spec for spec in SPECS for action in spec.ticks}
#: Every Scheduler tick action a kind runs.
TICK_ACTIONS: tuple[str, ...] = tuple(_TICKS)

#: Every policy switch, in the kinds' order (`doctor` prints them).
SWITCHES: tuple[str, ...] = tuple(dict.fromkeys(spec.switch for spec in SPECS if spec.switch))

#: The kinds' own `doctor` checks (`KindSpec.doctor`), one per name.
DOCTOR_CHECKS: tuple[KindCheck, ...] = tuple(spec.doctor for spec in SPECS if spec.doctor is not None)

#: The policy document's top-level keys in the order it has always listed them (its validation
#: errors, a misspelt key's "Allowed here", docs/policy.md): the shared sections of `Policy` and
#: the kinds' own; a kind's section not named here comes after them.
DOCUMENT_ORDER: tuple[str, ...] = (
    *("cluster", "windows", "gpu_idle", "rebalance", "replacement", "checkpoint", "drain"),
    *("capacity_blocks", "karpenter_expiry", "gpu_health", "alerts", "maintenance", "nodepool_windows"),
)

#: The policy document's model: `Policy` with every section a kind adds (`KindSpec.policy`).
POLICY: type[Policy] = with_sections(
    {spec.policy.key: spec.policy.model for spec in SPECS if spec.policy}, order=DOCUMENT_ORDER
)

#: The kind a GPU-health scan reports as (the first kind with a part in it).
SCAN_KIND: Kind = next(spec.kind for spec in SPECS if spec.scan is not None)


def _only(specs: list[KindSpec], what: str) -> KindSpec:
    if len(specs) != 1:
        raise TypeError(f"{what}: {len(specs)} kinds say so, one must ({', '.join(s.kind.value for s in specs)})")
    return specs[0]


#: The kind the runbook function's requests run as (the one spec routed to it).
RUNBOOK: KindSpec = _only([s for s in SPECS if s.route == "runbook"], "the runbook's kind")

#: The kind each input that fails before it reaches one reports as (`KindSpec.unrouted`).
UNROUTED: dict[Unrouted, Kind] = {
    which: _only([s for s in SPECS if s.unrouted == which], f"the kind of an unrouted {which} input").kind
    for which in ("scheduler", "operator")
}


def spec_of(kind: Kind | str) -> KindSpec:
    """The spec of ``kind`` (a `Kind`, or its value)."""
    return _BY_KIND[Kind(kind)]


def rules(alarm_prefixes: Sequence[str] = (DEFAULT_ALARM_PREFIX,)) -> tuple[Rule, ...]:
    """Every rule the stack deploys, with the GPU-idle alarm name prefixes it is configured with."""
    prefixes = list(dict.fromkeys([DEFAULT_ALARM_PREFIX, *alarm_prefixes]))
    return tuple(rule for spec in SPECS for rule in spec.rules(prefixes))


def routed_rules(alarm_prefixes: Sequence[str] = (DEFAULT_ALARM_PREFIX,)) -> tuple[tuple[KindSpec, Rule], ...]:
    """Every rule the stack deploys, with the spec of the kind it delivers."""
    prefixes = list(dict.fromkeys([DEFAULT_ALARM_PREFIX, *alarm_prefixes]))
    return tuple((spec, rule) for spec in SPECS for rule in spec.rules(prefixes))


def tick_spec(action: str) -> KindSpec:
    """The spec whose kind runs the Scheduler tick ``action`` (the model allows only those)."""
    return _TICKS[action]


def tick_switch(action: str) -> str | None:
    """The switch that turns the tick ``action`` off (None: it always runs)."""
    spec = _TICKS.get(action)
    if spec is None or not spec.ticks[action].switched:
        return None
    return spec.switch


def route_of_kind(kind: Kind) -> Route:
    """The deployed function the kind's events go to."""
    return spec_of(kind).route
