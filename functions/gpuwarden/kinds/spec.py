"""What a kind is: one object holding everything gpuwarden knows and does for one contract kind
(docs/architecture.md, "Kinds").

A kind is one module in this package that defines ``SPEC = KindSpec(...)``: its events (source
models) and the EventBridge rules that deliver them, the function they go to, whether it is
voluntary and the Karpenter disruption reason it counts as, its plan, guards and hooks into the
one disruption sequence, the use case that runs a notice, its Scheduler ticks and its part of the
periodic reconcile or of the GPU-health scan, its switch, its sample events and its page anchor.
The registry (`registry`) finds every such module; nothing else names a kind's list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.doctor.facts import KindCheck
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.hooks import KindHooks
from gpuwarden.services.engine.result import Result
from gpuwarden.sources import Envelope, Rule, SchedulerTick
from gpuwarden.sources.rules import detail_types_of

Route = Literal["interruption", "planning", "gpu_signals", "scheduled", "runbook"]
"""The deployed function (its handler module, `gpuwarden.handlers.<route>`) a kind's input goes to."""

Unrouted = Literal["scheduler", "operator"]
"""Inputs that report as one kind when they fail before reaching any (`dispatch.fallback_kind`): a
Scheduler input that is not the GPU-health scan's (``scheduler``); an operator's — a runbook request,
`gpuwarden release`, anything unrecognised (``operator``)."""

#: One notice of the kind, run with the kind's hooks (``drain_locally``: the drain runs here to its
#: end, as the command line does; deployed, the drain workflow takes it over).
Handle = Callable[[Notice, Deps, KindHooks, bool], Result]
#: The reason an event of the kind's detail-types that no deployed rule takes is ignored (None:
#: not the kind's to say), given the rules as deployed.
WhyIgnored = Callable[[Mapping[str, Any], Sequence[Rule]], str | None]
#: The kind's part of the periodic reconcile, into the tick's record: what it did, as text to
#: append to the tick's reason. Each answer of its own (a plan) goes into ``planned``.
Reconcile = Callable[[Recorder, KindHooks, bool, list[Result]], str]
#: The kind's part of the GPU-health scan (every minute, `gpuwarden scan`): one answer, its nodes'
#: answers under ``results``. Every part reads the scan's one LIST of the nodes (the last argument,
#: `node_ops.scanned_nodes`): the scan reads the cluster once.
Scan = Callable[[Deps, KindHooks, bool, Sequence[NodeView]], Result]
#: The Karpenter disruption reason a voluntary action of the kind counts as, given the node's pods.
KarpenterReason = Callable[[Sequence[PodView]], str]


@dataclass(frozen=True)
class TickCall:
    """One Scheduler tick, as a kind's tick runs it."""

    tick: SchedulerTick
    deps: Deps
    hooks: KindHooks
    drain_locally: bool
    #: The periodic reconcile only: every kind's reconcile part (`KindSpec.reconcile`), in one call.
    also: Callable[[Recorder], str] | None = None


@dataclass(frozen=True)
class Tick:
    """A Scheduler tick action a kind runs (its input: `sources.ticks`)."""

    run: Callable[[TickCall], Result]
    #: Whether the kind's switch turns this tick off (the reconcile runs whatever is switched off).
    switched: bool = True


@dataclass(frozen=True)
class PolicySection:
    """A section a kind adds to the policy document (docs/policy.md): its key and its model, read
    with `domain.policy.section_of` (the model's defaults when the document leaves it out)."""

    key: str
    model: type[BaseModel]


def plan_due(run: Callable[[str, Deps, KindHooks, bool], Result]) -> Tick:
    """The tick of a plan falling due (an action ending in ``-due``, its one-time schedule fired):
    ``run`` the plan it names, with the kind's hooks."""

    def due(call: TickCall) -> Result:
        assert call.tick.plan_id is not None  # the model requires it of a '-due' action
        return run(call.tick.plan_id, call.deps, call.hooks, call.drain_locally)

    return Tick(due)


def no_rules(prefixes: Sequence[str]) -> tuple[Rule, ...]:
    return ()


@dataclass(frozen=True)
class KindSpec:
    """Everything one kind is (see the module's docstring)."""

    kind: Kind
    #: What a notice of the kind means, in one line.
    summary: str
    #: Voluntary kinds ask the windows and the NodePools' budgets, never override a PDB, honour
    #: do-not-disrupt; involuntary ones act before their deadline whatever those say.
    voluntary: bool
    #: The deployed function the kind's events go to.
    route: Route
    #: Where docs/events.md explains the kind (its heading's anchor).
    doc: str
    #: Its plan, guards and hooks into the one disruption sequence (`engine.pipeline`).
    hooks: KindHooks = field(default_factory=KindHooks)
    #: How one notice of the kind is run (None: the kind has no notices of its own).
    handle: Handle | None = None
    #: The Karpenter disruption reason a voluntary action of the kind counts as under a NodePool's
    #: budgets, from the node's pods (``Underutilized``, ``Empty``, …); None: it counts only under
    #: budgets that name no reasons (docs/cluster.md).
    karpenter_reason: KarpenterReason | None = None
    #: The policy switch that turns the kind off (docs/policy.md#switches); None: always on.
    switch: str | None = None
    #: The section the kind adds to the policy, when its settings are its own.
    policy: PolicySection | None = None
    #: The EventBridge event models its notices come from (their ``detail_type`` Literals).
    models: tuple[type[Envelope], ...] = ()
    #: The EventBridge rules that deliver its events, given the GPU-idle alarm name prefixes.
    rules: Callable[[Sequence[str]], tuple[Rule, ...]] = no_rules
    #: Why an event of its detail-types that no rule takes is ignored (default: no rule takes it).
    why_ignored: WhyIgnored | None = None
    #: Sample events in events/, each one of its kind.
    samples: tuple[str, ...] = ()
    #: The Scheduler tick actions it runs, by action.
    ticks: Mapping[str, Tick] = field(default_factory=dict)
    #: Its part of the periodic reconcile (the ``reconcile`` tick), while switched on.
    reconcile: Reconcile | None = None
    #: Its part of the GPU-health scan.
    scan: Scan | None = None
    #: The inputs that report as this kind when they fail before they reach a kind (one kind each).
    unrouted: Unrouted | None = None
    #: Its own `gpuwarden doctor` check, in its room (reported in the contract's order: docs/cli.md).
    doctor: KindCheck | None = None

    @property
    def detail_types(self) -> tuple[str, ...]:
        """The EventBridge detail-types of its events."""
        return tuple(t for model in self.models for t in detail_types_of(model))
