"""A NodePool's disruption budgets, read as Karpenter reads them (docs/cluster.md, "The NodePool's
own rules"): how many of the pool's nodes a voluntary action of a Karpenter reason may take now.

Each rule follows kubernetes-sigs/karpenter v1.13.0 (commit 86026aa), cited where it is ported:

- ``Budget.IsActive`` (pkg/apis/v1/nodepool.go): no ``schedule`` and no ``duration``: always
  active. Else the schedule is robfig/cron's ``ParseStandard("TZ=UTC " + schedule)``; the
  budget is active when the first fire strictly after ``now - duration`` is not after ``now``
  (a fire exactly ``duration`` ago does not count). robfig's ``Next`` returns Go's zero time
  when it finds nothing within five years, and the zero time is never after ``now``: a schedule
  that never fires is active.
- ``Budget.GetAllowedDisruptions``: an inactive budget allows any number; an active one its
  ``nodes``, a whole number or a percentage of the pool's nodes rounded UP
  (``intstr.GetScaledValueFromIntOrPercent(..., roundUp=true)``). A schedule or ``nodes`` that
  does not parse fails closed: 0.
- ``NodePool.GetAllowedDisruptionsByReason``: the smallest value of the budgets that apply to the
  reason (``reasons`` absent: every reason). ``MustGetAllowedDisruptions``: any invalid budget in
  the pool, whatever its reasons, makes the pool's answer 0.
- ``BuildDisruptionBudgetMapping`` (pkg/controllers/disruption/helpers.go): the pool's nodes are
  those Karpenter manages that are initialized (label ``karpenter.sh/initialized=true``), less
  those whose NodeClaim is ``InstanceTerminating``; allowed now = that minimum less the nodes being
  disrupted (not Ready, or ``MarkedForDeletion``: Karpenter's ``karpenter.sh/disrupted`` taint, a
  deleting Node or NodeClaim), never below 0. gpuwarden adds its own marks to "being disrupted",
  until the drain completes (as its windows count them).
- A gpu-idle notice is ``Underutilized``, or ``Empty`` when no pod on the node is reschedulable
  (pkg/utils/pod/scheduling.go ``IsReschedulable``: active, or a terminating StatefulSet pod; not
  a DaemonSet's; not a mirror pod). The other voluntary kinds name no reason: only budgets that
  name none apply to them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.nodepools import Budget, NodeClaimView, NodePoolView, claim_of
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.domain.windows import Allowance
from gpuwarden.domain.windows.cron import CronError, parse_robfig
from gpuwarden.domain.wording import count

UNDERUTILIZED = "Underutilized"
EMPTY = "Empty"
INITIALIZED_LABEL = "karpenter.sh/initialized"
INSTANCE_TERMINATING = "InstanceTerminating"
_INT = re.compile(r"[+-]?[0-9]+")


class BudgetInvalid(ValueError):
    """A budget Karpenter cannot read (its schedule or nodes): Karpenter then allows nothing."""


def _robfig_next(schedule_text: str, after: datetime) -> datetime | None:
    """robfig/cron ``SpecSchedule.Next`` in UTC: the first fire strictly after ``after`` (whole
    seconds, second 0), or None where robfig returns the zero time (nothing within five years)."""
    schedule = parse_robfig(schedule_text)
    start = after.astimezone(UTC).replace(microsecond=0, tzinfo=None) + timedelta(seconds=1)
    found = schedule.next_match(start, datetime(min(start.year + 5, 9999), 12, 31, 23, 59))
    return None if found is None else found.replace(tzinfo=UTC)


def budget_active(budget: Budget, now: datetime) -> bool:
    """``Budget.IsActive``. Raises `BudgetInvalid` for a schedule robfig/cron refuses."""
    if budget.schedule is None and budget.duration is None:
        return True
    try:
        next_hit = _robfig_next(budget.schedule or "", now - (budget.duration or timedelta()))
    except CronError as err:
        raise BudgetInvalid(f"invalid cron: {err}") from None
    return next_hit is None or next_hit <= now.astimezone(UTC)


def budget_nodes(budget: Budget, pool_size: int, now: datetime) -> int | None:
    """``Budget.GetAllowedDisruptions``: None while inactive (any number). Raises `BudgetInvalid`."""
    if budget.invalid is not None:
        raise BudgetInvalid(budget.invalid)
    if not budget_active(budget, now):
        return None
    text = budget.nodes
    if _INT.fullmatch(text):  # GetIntStrFromValue: strconv.Atoi succeeds, a whole number
        return int(text)
    if not (text.endswith("%") and _INT.fullmatch(text[:-1])):
        raise BudgetInvalid(f"invalid value for nodes {text!r}: a number or a percentage")
    return -(-int(text[:-1]) * pool_size // 100)  # of the pool's nodes, rounded up


def applies(budget: Budget, reason: str | None) -> bool:
    """``budget.Reasons == nil || lo.Contains(budget.Reasons, reason)``."""
    return budget.reasons is None or (reason is not None and reason in budget.reasons)


@dataclass(frozen=True)
class BudgetAnswer:
    """How many more of the pool's nodes a voluntary action may take now (None: no budget limits
    it), the budget that decides, and why in words."""

    pool: str
    allowed: int | None
    budget: str | None
    reason: str

    @property
    def refused(self) -> bool:
        return self.allowed is not None and self.allowed < 1


def allowed_by_budgets(pool: NodePoolView, pool_size: int, reason: str | None, now: datetime) -> tuple[int | None, str]:
    """``MustGetAllowedDisruptions``: (the smallest applying active budget's nodes, which budget),
    (None, "") when none limits; (0, that budget) when any budget of the pool does not read."""
    best: tuple[int, str] | None = None
    for index, budget in enumerate(pool.budgets):
        try:
            value = budget_nodes(budget, pool_size, now)
        except BudgetInvalid as err:
            return 0, f"{budget.describe(index)} does not read ({err}): Karpenter allows no disruption of the pool"
        if value is not None and applies(budget, reason) and (best is None or value < best[0]):
            best = (value, budget.describe(index))
    return (None, "") if best is None else best


def counted(node: NodeView, pool: str, claims: Sequence[NodeClaimView]) -> bool:
    """A node Karpenter counts in the pool's size: its own, initialized, instance not terminating."""
    if node.nodepool != pool or node.labels.get(INITIALIZED_LABEL) != "true":
        return False
    claim = claim_of(node, claims)
    return claim is None or not claim.condition(INSTANCE_TERMINATING)


def being_disrupted(node: NodeView, claims: Sequence[NodeClaimView]) -> str | None:
    """Why the node already uses the pool's budget (None: it does not)."""
    ready = node.conditions.get("Ready")
    claim = claim_of(node, claims)
    if node.karpenter_disrupted:
        return "tainted karpenter.sh/disrupted"
    if node.deleting or (claim is not None and claim.deleting):
        return "being deleted"
    if node.annotations.get(ann.EVENT_ID) and ann.DRAIN_COMPLETED not in node.annotations:
        # as the windows count it (node_ops.voluntary_in_progress): a drained node's disruption is over
        return f"held by gpuwarden for {node.annotations.get(ann.KIND) or 'a notice'}"
    if ready is None or ready.status != "True":
        return "not Ready"
    return None


def budget_answer(
    pool: NodePoolView,
    node: NodeView,
    nodes: Sequence[NodeView],
    reason: str | None,
    now: datetime,
    claims: Sequence[NodeClaimView] = (),
) -> BudgetAnswer:
    """How many more of ``pool``'s nodes a voluntary action of Karpenter ``reason`` (None: a kind
    that names none) may take at ``now``. ``nodes``: the cluster's (or the pool's) nodes, one
    listing; ``node``, the one asked about, is not counted as being disrupted (taking it is the
    disruption in question)."""
    members = [n for n in nodes if counted(n, pool.name, claims)]
    limit, decider = allowed_by_budgets(pool, len(members), reason, now)
    if limit is None:
        return BudgetAnswer(pool.name, None, None, f"NodePool {pool.name}: no active budget limits {_what(reason)}")
    busy = [n.name for n in members if n.name != node.name and being_disrupted(n, claims)]
    allowed = max(limit - len(busy), 0)
    shown = f" ({', '.join(busy[:5])}{', …' if len(busy) > 5 else ''})" if busy else ""
    words = (
        f"NodePool {pool.name} {decider} allows {limit} of its {count(len(members), 'node')} for {_what(reason)}, "
        f"{len(busy)} being disrupted{shown}: {allowed} more{_uncounted(node, pool.name, claims)}"
    )
    return BudgetAnswer(pool.name, allowed, decider, words)


def _uncounted(node: NodeView, pool: str, claims: Sequence[NodeClaimView]) -> str:
    """Why the node asked about, one of the pool's, is not among the nodes counted (else "")."""
    if node.nodepool != pool or counted(node, pool, claims):
        return ""
    if node.labels.get(INITIALIZED_LABEL) != "true":
        return f" ({node.name} is not counted: Karpenter has not initialized it yet)"
    return f" ({node.name} is not counted: its instance is terminating)"


def _what(reason: str | None) -> str:
    return f"reason {reason}" if reason else "an action that names no reason"


# ----------------------------------------------------------------------------- the kind's reason


def reschedulable(pod: PodView) -> bool:
    """Karpenter's ``IsReschedulable``: a workload pod that would need a place elsewhere."""
    active = not pod.finished and not pod.terminating
    stateful = pod.owner_kind == "StatefulSet" and pod.terminating
    return (active or stateful) and not pod.is_daemonset and not pod.is_mirror and pod.owner_kind != "Node"


def gpu_idle_reason(pods: Sequence[PodView]) -> str:
    """The Karpenter reason a gpu-idle reclaim counts under: Empty, or Underutilized (its spec's
    ``karpenter_reason``; a kind whose spec names none counts only under budgets without reasons)."""
    return UNDERUTILIZED if any(reschedulable(p) for p in pods) else EMPTY


# ----------------------------------------------------------------------------- windows first


@dataclass(frozen=True)
class VoluntaryVerdict:
    """Whether a voluntary action may go on, and who refused: ``window`` (gpuwarden's policy) or
    ``budget`` (the NodePool's own); the windows are asked first and the first refusal is the reason."""

    refused: str | None
    by: str | None
    allowance: Allowance
    budget: BudgetAnswer | None


def voluntary_verdict(allowance: Allowance, budget: BudgetAnswer | None) -> VoluntaryVerdict:
    """One answer for a voluntary action: the windows' (``windows.voluntary_allowance``), then the
    NodePool's budgets (`budget_answer`; None for a node outside Karpenter, or a forced runbook)."""
    if allowance.allowed is not None and allowance.allowed < 1:
        return VoluntaryVerdict(allowance.reason, "window", allowance, budget)
    if budget is not None and budget.refused:
        return VoluntaryVerdict(budget.reason, "budget", allowance, budget)
    return VoluntaryVerdict(None, None, allowance, budget)
