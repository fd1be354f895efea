"""The one table of protections (docs/protections.md): for every kind, what holds a node or a pod
against gpuwarden and until when — `karpenter.sh/do-not-disrupt`, PodDisruptionBudgets, the
NodePool's disruption budgets, gpuwarden's own windows, the NodeClaim's `terminationGracePeriod`,
and the notice's deadline. The rule behind it (docs/events.md, "Never harsher than Karpenter
alone"): on a voluntary or planned path gpuwarden takes no pod Karpenter alone would not take in
the same event, and takes one earlier only within the kind's planned lead, after asking it to
checkpoint.

What Karpenter does, read from kubernetes-sigs/karpenter (main, 2026-11; v1.x):

- ``pkg/utils/pod/scheduling.go`` ``IsEvictable``: Karpenter's drain evicts only active pods that
  are not mirror pods, do not tolerate ``karpenter.sh/disrupted``, and carry no active
  ``karpenter.sh/do-not-disrupt`` (``IsDoNotDisruptActive``: ``"true"``, or a duration since the
  pod started). ``IsDrainable``: such pods still hold the node's drain ("Karpenter won't
  orchestrate the eviction").
- ``pkg/controllers/node/termination/controller.go`` ``nodeTerminationTime``: the node's forced
  moment is the NodeClaim's ``karpenter.sh/nodeclaim-termination-timestamp`` (set by
  ``pkg/controllers/nodeclaim/lifecycle`` at its deletion + ``spec.terminationGracePeriod``);
  none set: no forced moment at all.
- ``pkg/controllers/node/termination/terminator/eviction.go`` ``needsForceDelete`` and
  ``Queue.Reconcile``: a pod is force-deleted (PDBs and do-not-disrupt bypassed) only from
  ``nodeTerminationTime - its terminationGracePeriodSeconds``; before that, a do-not-disrupt pod
  is left and any other pod is evicted through the Eviction API, which its PDB may refuse for ever.
- ``pkg/controllers/nodeclaim/expiration/controller.go`` ``Reconcile``: expiry deletes the
  NodeClaim at ``creationTimestamp + expireAfter``, forcefully: no budget holds it.
- ``pkg/apis/v1/nodepool.go`` ``GetAllowedDisruptionsByReason``: budgets count Karpenter's
  voluntary disruptions (consolidation, drift) only (ported in `domain.budgets`).

So an expiry never takes a do-not-disrupt pod before ``expiry + terminationGracePeriod`` (with
none, never), nor a pod its PDB protects before ``expiry + terminationGracePeriod - its grace``.
A loss warning (Spot, a reclaimed reservation, a Capacity Block's end, a failing GPU that node
repair replaces without a drain) takes the instance at its deadline, whatever protects its pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.views import NodeView, PodView


class Holds(StrEnum):
    """How long one protection holds against gpuwarden on one kind's path."""

    #: gpuwarden never overrides it.
    ALWAYS = "always"
    #: It refuses the whole node (nothing is written, the answer names it).
    REFUSES_NODE = "refuses the node"
    #: As `REFUSES_NODE`, unless the runbook action is forced.
    UNLESS_FORCED = "refuses the node unless forced"
    #: As `REFUSES_NODE`, but the instance goes at the deadline whatever holds it: the node's opted-in
    #: pods are asked to checkpoint at the latest start before it, and nothing is evicted.
    REFUSES_NODE_ASKS = "refuses the node; its opted-in pods are asked to checkpoint before the deadline"
    #: It holds until the notice's deadline forces the drain (then it no longer does).
    UNTIL_DEADLINE = "until the deadline forces the drain"
    #: A PDB: until ``deadline - the pod's grace`` (then the pod is deleted with the grace left).
    UNTIL_DEADLINE_GRACE = "until deadline - the pod's grace"
    #: Until ``expiry - karpenter_expiry.lead_minutes``, when Karpenter's expiry becomes forceful.
    UNTIL_LEAD = "until expiry - lead"
    #: An owner's do-not-disrupt pod is asked to checkpoint if it opted in and never evicted or
    #: deleted: Karpenter's termination forces it at expiry + terminationGracePeriod, or never.
    LEFT_TO_KARPENTER = (
        "left to Karpenter: asked to checkpoint if opted in, never evicted (Karpenter forces it at "
        "expiry + terminationGracePeriod; none set: never)"
    )
    #: A PDB holds until Karpenter's termination would force the pod (``needsForceDelete``):
    #: expiry + terminationGracePeriod - the pod's grace; with none set, always.
    UNTIL_KARPENTER_FORCES = "until expiry + terminationGracePeriod - the pod's grace (none set: always)"
    #: The NodeClaim's terminationGracePeriod sets Karpenter's forced moment (expiry + it).
    SETS_FORCED_MOMENT = "sets Karpenter's forced moment: expiry + it"
    #: The instance is lost at the deadline: nothing holds past it.
    NOT_PAST_DEADLINE = "not past the deadline (the instance is lost)"
    #: Not asked: the kind's drain does not wait for it.
    NOT_ASKED = "not asked"
    #: gpuwarden takes no pod on this kind's path.
    NOTHING_TAKEN = "nothing taken"


@dataclass(frozen=True)
class Protections:
    """One row of the table: one kind."""

    kind: Kind
    do_not_disrupt: Holds
    pdb: Holds
    budgets: Holds
    windows: Holds
    termination_grace: Holds
    deadline: str
    #: A planned drain may take pods up to this much before Karpenter (or EC2) would, after asking
    #: them to checkpoint (the policy key that sets it), else None.
    lead: str | None = None


_LOSS = {
    "do_not_disrupt": Holds.NOT_PAST_DEADLINE,
    "pdb": Holds.UNTIL_DEADLINE_GRACE,
    "budgets": Holds.NOT_ASKED,
    "windows": Holds.NOT_ASKED,
    "termination_grace": Holds.NOT_PAST_DEADLINE,
}
_VOLUNTARY = {
    "do_not_disrupt": Holds.REFUSES_NODE,
    "pdb": Holds.ALWAYS,
    "budgets": Holds.REFUSES_NODE,
    "windows": Holds.REFUSES_NODE,
    "termination_grace": Holds.NOT_ASKED,
}
_NOTHING = dict.fromkeys(("do_not_disrupt", "pdb", "budgets", "windows", "termination_grace"), Holds.NOTHING_TAKEN)

TABLE: dict[Kind, Protections] = {
    p.kind: p
    for p in (
        Protections(Kind.SPOT_INTERRUPTION, **_LOSS, deadline="event time + 120 s: EC2 takes the instance"),
        Protections(
            Kind.CAPACITY_RESERVATION_INTERRUPTION, **_LOSS, deadline="instance-termination-time (else time + 120 s)"
        ),
        Protections(Kind.CAPACITY_BLOCK_EXPIRY, **_LOSS, deadline="event time + 10 min: EC2 terminates the block"),
        Protections(
            Kind.CAPACITY_BLOCK_PLAN,
            **_LOSS,
            deadline="block end - 30 min: EC2 starts terminating",
            lead="capacity_blocks.lead_minutes",
        ),
        Protections(
            Kind.GPU_UNHEALTHY,
            **_LOSS,
            deadline="condition since + gpu_health.repair_after: node repair replaces the node without a drain",
        ),
        Protections(
            Kind.KARPENTER_EXPIRY,
            do_not_disrupt=Holds.LEFT_TO_KARPENTER,
            pdb=Holds.UNTIL_KARPENTER_FORCES,
            budgets=Holds.UNTIL_LEAD,
            windows=Holds.UNTIL_LEAD,
            termination_grace=Holds.SETS_FORCED_MOMENT,
            deadline="NodeClaim creation + expireAfter (+ terminationGracePeriod for the pods Karpenter forces)",
            lead="karpenter_expiry.lead_minutes",
        ),
        Protections(
            Kind.SCHEDULED_MAINTENANCE,
            do_not_disrupt=Holds.REFUSES_NODE_ASKS,
            pdb=Holds.ALWAYS,
            budgets=Holds.UNTIL_DEADLINE,
            windows=Holds.UNTIL_DEADLINE,
            termination_grace=Holds.NOT_ASKED,
            deadline="the Health event's start time: AWS's change",
        ),
        Protections(Kind.REBALANCE, **_VOLUNTARY, deadline="none"),
        Protections(Kind.GPU_IDLE, **_VOLUNTARY, deadline="none"),
        Protections(
            Kind.MANUAL,
            do_not_disrupt=Holds.UNLESS_FORCED,
            pdb=Holds.ALWAYS,
            budgets=Holds.UNLESS_FORCED,
            windows=Holds.UNLESS_FORCED,
            termination_grace=Holds.NOT_ASKED,
            deadline="per request",
        ),
        Protections(Kind.INSTANCE_STOPPING, **_NOTHING, deadline="now: the instance is going"),
        Protections(Kind.KARPENTER_DISRUPTION, **_NOTHING, deadline="Karpenter's own (only checkpoints are asked)"),
        Protections(Kind.BUDGET_WINDOW, **_NOTHING, deadline="none"),
    )
}


def of(kind: Kind) -> Protections:
    """The kind's row (every shipped kind has one: tests/unit/test_protections.py). A kind added
    without one fails closed: every protection holds, as for a voluntary kind, until its row says
    which may give way (docs/architecture.md, "Adding a kind")."""
    row = TABLE.get(kind)
    return row if row is not None else Protections(kind, **_VOLUNTARY, deadline="none (no row: every protection holds)")


def leaves_do_not_disrupt(kind: Kind) -> bool:
    """The kind's drain leaves an owner's do-not-disrupt pod on the node (asked to checkpoint if it
    opted in, never evicted or deleted): Karpenter's own termination takes it, or nothing does."""
    return of(kind).do_not_disrupt is Holds.LEFT_TO_KARPENTER


def refuses_on_do_not_disrupt(kind: Kind, force: bool = False) -> bool:
    """Whether do-not-disrupt on the node or one of its pods refuses the kind's action."""
    holds = of(kind).do_not_disrupt
    return holds in (Holds.REFUSES_NODE, Holds.REFUSES_NODE_ASKS) or (holds is Holds.UNLESS_FORCED and not force)


def do_not_disrupt_refusal(kind: Kind, node: NodeView, pods: Sequence[PodView], force: bool = False) -> str | None:
    """Why do-not-disrupt refuses the kind's action on ``node`` (None: it does not)."""
    if not refuses_on_do_not_disrupt(kind, force):
        return None
    if node.do_not_disrupt:
        return f"node {node.name} carries karpenter.sh/do-not-disrupt"
    holder = next((p for p in pods if p.do_not_disrupt and not p.finished), None)
    if holder is not None:
        return f"pod {holder.key} carries karpenter.sh/do-not-disrupt"
    return None


def karpenter_forces_at(expiry: datetime, termination_grace: timedelta | None) -> datetime | None:
    """The moment Karpenter's termination forces an expiring node's pods (``nodeTerminationTime``):
    expiry + the NodeClaim's terminationGracePeriod; None when it has none (never)."""
    return None if termination_grace is None else expiry + termination_grace


#: The expiry notice's detail key for Karpenter's forced moment (RFC 3339; absent: never).
FORCED_AT = "karpenter_forces_at"


def forced_at_of(notice: Notice) -> datetime | None:
    """Karpenter's forced moment an expiry notice carries (None: none, or not an expiry)."""
    text = notice.detail.get(FORCED_AT)
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None


def force_deadline(kind: Kind | None, deadline: datetime | None, forced_at: datetime | None) -> datetime | None:
    """From when a pod a PDB still protects may be deleted (less its grace): the deadline of a loss
    warning; Karpenter's forced moment on an expiry (``forced_at``; None: never)."""
    if kind is not None and of(kind).pdb is Holds.UNTIL_KARPENTER_FORCES:
        return forced_at
    return deadline


def do_not_disrupt_left(kind: Kind | None, pod: PodView, forced_at: datetime | None) -> str | None:
    """Why the kind's drain leaves ``pod`` (an owner's do-not-disrupt on an expiry), or None."""
    if kind is None or not pod.do_not_disrupt or not leaves_do_not_disrupt(kind):
        return None
    when = (
        f"until its terminationGracePeriod forces it at {forced_at.isoformat()}"
        if forced_at is not None
        else "and with no terminationGracePeriod on the NodeClaim it runs on"
    )
    return f"karpenter.sh/do-not-disrupt: Karpenter's expiry never evicts it (IsEvictable), {when}: left to Karpenter"


def left_for_good(kind: Kind | None, pods: Sequence[PodView], forced_at: datetime | None) -> list[PodView]:
    """The pods the kind's drain leaves and nothing will ever force off (do-not-disrupt on an expiry
    whose NodeClaim has no terminationGracePeriod): no replacement is for them, as Karpenter's
    provisioner launches none for them (v1.14.1 ``IsCurrentlyReschedulable``; docs/cluster.md#expiry)."""
    return [] if forced_at is not None else [p for p in pods if do_not_disrupt_left(kind, p, None)]


COLUMNS = (
    ("do_not_disrupt", "`karpenter.sh/do-not-disrupt`"),
    ("pdb", "PodDisruptionBudget"),
    ("budgets", "NodePool budgets"),
    ("windows", "gpuwarden windows"),
    ("termination_grace", "`terminationGracePeriod`"),
    ("deadline", "deadline"),
    ("lead", "planned lead"),
)


def table_markdown() -> str:
    """The table as docs/protections.md shows it (tests/unit/test_protections.py keeps them equal)."""
    head = "| kind | " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|---" * (len(COLUMNS) + 1) + "|"
    rows = [
        f"| `{p.kind.value}` | " + " | ".join(str(getattr(p, field) or "—") for field, _ in COLUMNS) + " |"
        for p in TABLE.values()
    ]
    return "\n".join([head, rule, *rows])
