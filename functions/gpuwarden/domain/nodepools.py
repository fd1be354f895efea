"""Karpenter's NodePool and NodeClaim as small frozen views (pure), read from the API's JSON.

What gpuwarden obeys of them is in docs/cluster.md ("The NodePool's own rules"): the budgets
(`domain.budgets`), the limits and weights (`domain.tiers`), and a NodeClaim's expiry
(`domain.expiry`). Field names and defaults are Karpenter's v1 API (kubernetes-sigs/karpenter
pkg/apis/v1/nodepool.go, nodeclaim.go, duration.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.domain.quantity import parse_quantity
from gpuwarden.domain.views import NODEPOOL_LABEL, NodeView, Taint

#: Karpenter's own reasons for a disruption budget (`DisruptionReason`, nodepool.go).
REASONS = ("Underutilized", "Empty", "Drifted")
#: The CRD's default for ``spec.disruption.budgets`` (what the API server stores when it is absent).
DEFAULT_BUDGET_NODES = "10%"
#: ``expireAfter: Never`` (duration.go, ``Never``).
NEVER = "Never"

_GO_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_go_duration(text: str) -> timedelta:
    """Go's ``time.ParseDuration``, as Karpenter reads ``expireAfter``, ``duration`` and
    ``terminationGracePeriod`` (the CRDs narrow it further: whole s / m / h). ValueError otherwise."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return timedelta()
    total, at = Fraction(0), 0
    while at < len(body):
        match = _GO_PART.match(body, at)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: expected Go's form, such as '720h' or '1h30m'")
        total += Fraction(match.group(1)) * _GO_UNITS[match.group(2)]
        at = match.end()
    if not body:
        raise ValueError(f"invalid duration {text!r}: empty")
    seconds = -total if text.startswith("-") else total
    return timedelta(microseconds=int(seconds * 10**6))


# ----------------------------------------------------------------------------- NodePool


@dataclass(frozen=True)
class Budget:
    """One entry of ``spec.disruption.budgets``, as written. ``reasons`` None: the field is absent
    (the budget applies to every reason); an empty tuple is ``reasons: []``, which in Karpenter's
    ``GetAllowedDisruptionsByReason`` (``budget.Reasons == nil || lo.Contains(...)``) applies to
    none. ``invalid``: why a field does not read (Karpenter then allows no disruption at all)."""

    nodes: str
    schedule: str | None = None
    duration: timedelta | None = None
    reasons: tuple[str, ...] | None = None
    invalid: str | None = None

    def describe(self, index: int) -> str:
        """``budget #2 (nodes '0', schedule '0 9 * * 1-5' for 8h0m0s, reasons Underutilized)``."""
        parts = [f"nodes {self.nodes!r}"]
        if self.schedule is not None:
            parts.append(f"schedule {self.schedule!r} for {_go(self.duration)}")
        if self.reasons is not None:
            parts.append(f"reasons {', '.join(self.reasons) or '[]'}")
        return f"budget #{index + 1} ({', '.join(parts)})"


def _go(span: timedelta | None) -> str:
    """A duration as Go prints it (``8h0m0s``), the form users see in Karpenter's own messages."""
    if span is None:
        return "no duration"
    seconds = int(span.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s" if hours else (f"{minutes}m{secs}s" if minutes else f"{secs}s")


def budget_from_json(raw: Mapping[str, Any]) -> Budget:
    nodes = raw.get("nodes", DEFAULT_BUDGET_NODES)
    schedule = raw.get("schedule")
    reasons = raw.get("reasons")
    duration: timedelta | None = None
    invalid = None
    if raw.get("duration") is not None:
        try:
            duration = parse_go_duration(str(raw["duration"]))
        except ValueError as err:
            invalid = str(err)
    return Budget(
        nodes=str(nodes),
        schedule=None if schedule is None else str(schedule),
        duration=duration,
        reasons=None if reasons is None else tuple(str(r) for r in reasons),
        invalid=invalid,
    )


def _quantities(raw: object) -> dict[str, Fraction]:
    """Resource name → exact amount; a value that is not a quantity is left out (the caller that
    needs it reads ``unreadable``)."""
    found: dict[str, Fraction] = {}
    for name, value in (raw or {}).items() if isinstance(raw, Mapping) else ():
        amount = parse_quantity(value)
        if amount is not None:
            found[str(name)] = amount
    return found


@dataclass(frozen=True)
class NodePoolView:
    """What gpuwarden reads of a ``karpenter.sh/v1`` NodePool."""

    name: str
    #: ``spec.weight`` (1-100); absent is 0, as Karpenter orders it.
    weight: int = 0
    #: ``spec.replicas``: a static NodePool (no provisioning for pods, no weight, only limits.nodes).
    replicas: int | None = None
    #: ``spec.limits`` and ``status.resources`` (Karpenter's counter: the pool's nodes' capacity and
    #: ``nodes``, those being deleted left out), as exact amounts.
    limits: Mapping[str, Fraction] = field(default_factory=dict)
    resources: Mapping[str, Fraction] = field(default_factory=dict)
    #: ``spec.limits`` entries that are not quantities (a limit gpuwarden cannot read is refused).
    unreadable_limits: tuple[str, ...] = ()
    budgets: tuple[Budget, ...] = (Budget(nodes=DEFAULT_BUDGET_NODES),)
    #: The template: requirements (as JSON), taints, labels.
    requirements: tuple[Mapping[str, Any], ...] = ()
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def static(self) -> bool:
        return self.replicas is not None


def nodepool_from_json(obj: Mapping[str, Any]) -> NodePoolView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    disruption = spec.get("disruption") or {}
    raw_budgets = disruption.get("budgets")
    budgets = (
        (Budget(nodes=DEFAULT_BUDGET_NODES),)
        if raw_budgets is None
        else tuple(budget_from_json(b) for b in raw_budgets if isinstance(b, Mapping))
    )
    limits_raw = spec.get("limits") or {}
    limits = _quantities(limits_raw)
    return NodePoolView(
        name=str(meta.get("name", "")),
        weight=int(spec.get("weight") or 0),
        replicas=None if spec.get("replicas") is None else int(spec["replicas"]),
        limits=limits,
        resources=_quantities((obj.get("status") or {}).get("resources")),
        unreadable_limits=tuple(sorted(str(k) for k in limits_raw if k not in limits)),
        budgets=budgets,
        requirements=tuple(dict(r) for r in tspec.get("requirements") or () if isinstance(r, Mapping)),
        taints=tuple(Taint(str(t.get("key")), str(t.get("effect")), t.get("value")) for t in tspec.get("taints") or ()),
        labels=dict((template.get("metadata") or {}).get("labels") or {}),
    )


# ----------------------------------------------------------------------------- NodeClaim


@dataclass(frozen=True)
class NodeClaimView:
    """What gpuwarden reads of a ``karpenter.sh/v1`` NodeClaim."""

    name: str
    nodepool: str | None = None
    node_name: str | None = None
    provider_id: str | None = None
    created: datetime | None = None
    #: ``spec.expireAfter`` as written (``"720h"``, ``"Never"``); None when absent.
    expire_after: str | None = None
    termination_grace: str | None = None
    deleting: bool = False
    #: ``status.conditions``: type → status (``Launched``, ``InstanceTerminating``, ``DisruptionReason``…).
    conditions: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def condition(self, kind: str) -> bool:
        return self.conditions.get(kind) == "True"

    def owns(self, node: NodeView) -> bool:
        """The claim behind ``node``: the node's owner reference, ``status.nodeName`` or ``status.providerID``."""
        by_provider = node.provider_id is not None and self.provider_id == node.provider_id
        return node.nodeclaim == self.name or self.node_name == node.name or by_provider


def _time(raw: object) -> datetime | None:
    try:
        return isoparse(raw) if isinstance(raw, str) and raw else None
    except ValueError:
        return None


def nodeclaim_from_json(obj: Mapping[str, Any]) -> NodeClaimView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    expire = spec.get("expireAfter")
    grace = spec.get("terminationGracePeriod")
    return NodeClaimView(
        name=str(meta.get("name", "")),
        nodepool=(meta.get("labels") or {}).get(NODEPOOL_LABEL),
        node_name=status.get("nodeName"),
        provider_id=status.get("providerID"),
        created=_time(meta.get("creationTimestamp")),
        expire_after=None if expire is None else str(expire),
        termination_grace=None if grace is None else str(grace),
        deleting=bool(meta.get("deletionTimestamp")),
        conditions={
            str(c.get("type")): str(c.get("status", ""))
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type")
        },
        annotations=dict(meta.get("annotations") or {}),
    )


def claim_of(node: NodeView, claims: Sequence[NodeClaimView]) -> NodeClaimView | None:
    return next((c for c in claims if c.owns(node)), None)
