"""What to do to a node for a notice, and why (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuwarden.domain.budgets import VoluntaryVerdict
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.domain.windows import Allowance


@dataclass(frozen=True)
class NodePlan:
    """The node-level steps for one notice. `refused` explains a voluntary action the rules stop."""

    cordon: bool
    checkpoint: bool
    replace: bool
    drain: bool
    reason: str
    refused: str | None = None


def do_not_disrupt_reason(node: NodeView, pods: Sequence[PodView]) -> str | None:
    if node.do_not_disrupt:
        return f"node {node.name} carries karpenter.sh/do-not-disrupt"
    holder = next((p for p in pods if p.do_not_disrupt and not p.finished), None)
    if holder is not None:
        return f"pod {holder.key} carries karpenter.sh/do-not-disrupt"
    return None


def window_refusal(allowance: Allowance) -> str | None:
    if allowance.allowed is None or allowance.allowed > 0:
        return None
    return allowance.reason


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
        return NodePlan(True, True, policy.replacement.enabled, True, reason)

    return plan


def drain_with(reason: str, *, replace: bool = True) -> Plan:
    """Cordon, checkpoint, drain; a replacement where ``replace`` and the policy allow one. The kind's
    guards (windows, do-not-disrupt, its own) decide before the mark."""

    def plan(node: NodeView, pods: Sequence[PodView], policy: Policy, windows: AskWindows) -> NodePlan:
        return NodePlan(True, True, replace and policy.replacement.enabled, True, reason)

    return plan


def nothing_to_do(reason: str) -> Plan:
    """No step on the node (an instance already stopping: only its loss is recorded)."""

    def plan(node: NodeView, pods: Sequence[PodView], policy: Policy, windows: AskWindows) -> NodePlan:
        return NodePlan(False, False, False, False, reason)

    return plan
