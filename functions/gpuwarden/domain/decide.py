"""What to do to a node for a notice, and why (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.budgets import VoluntaryVerdict
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import NodeView, PodView


@dataclass(frozen=True)
class NodePlan:
    """The node-level steps for one notice (the node is cordoned whenever a step runs). `refused`
    explains a voluntary action the rules stop."""

    checkpoint: bool
    replace: bool
    drain: bool
    reason: str
    refused: str | None = None


#: A loss warning handled more than this long after its own deadline, for a node that is still
#: there, is a replay (a dead-letter redrive, a copied sample): EC2 did not take the node.
STALE_AFTER = timedelta(minutes=10)


def stale_warning(node: NodeView, deadline: datetime | None, now: datetime) -> str | None:
    """Why a warning that a node is about to be lost is stale (docs/events.md, "Stale warnings"):
    its deadline passed more than `STALE_AFTER` ago and the node is still there. None: handle it,
    as fast as the time left allows."""
    if deadline is None or now - deadline <= STALE_AFTER:
        return None
    late = now - deadline
    return (
        f"stale: the warning's deadline {ann.rfc3339(deadline)} passed {_duration(late)} before it was "
        f"handled at {ann.rfc3339(now)}, and node {node.name} is still there: a replay, not a loss "
        f"(more than {int(STALE_AFTER.total_seconds() // 60)} min late); nothing written"
    )


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    return f"{days}d {hours}h {minutes}min" if days else f"{hours}h {minutes}min" if hours else f"{minutes}min"


#: What the windows, then the node's NodePool's budgets, say of a voluntary disruption of the node
#: now, asked only when a plan needs it (it lists nodes and reads the NodePool).
AskWindows = Callable[[], VoluntaryVerdict]
#: A kind's plan: the node-level steps one notice asks for, decided on the node, its pods, the
#: policy and what the windows allow (each kind's spec names its own: gpuwarden/kinds/).
Plan = Callable[[NodeView, Sequence[PodView], Policy, AskWindows], NodePlan]


def loss_warning(reason: str) -> Plan:
    """The plan of a warning that the node is about to be lost: cordon, checkpoint, replace (as the
    policy allows) and drain before the deadline, whatever the windows or do-not-disrupt say."""

    def plan(node: NodeView, pods: Sequence[PodView], policy: Policy, windows: AskWindows) -> NodePlan:
        return NodePlan(True, policy.replacement.enabled, True, reason)

    return plan


def drain_with(reason: str, *, replace: bool = True) -> Plan:
    """Cordon, checkpoint, drain; a replacement where ``replace`` and the policy allow one. The kind's
    guards (windows, do-not-disrupt, its own) decide before the mark."""

    def plan(node: NodeView, pods: Sequence[PodView], policy: Policy, windows: AskWindows) -> NodePlan:
        return NodePlan(True, replace and policy.replacement.enabled, True, reason)

    return plan


def nothing_to_do(reason: str) -> Plan:
    """No step on the node (an instance already stopping: only its loss is recorded)."""

    def plan(node: NodeView, pods: Sequence[PodView], policy: Policy, windows: AskWindows) -> NodePlan:
        return NodePlan(False, False, False, reason)

    return plan
