"""What to do to a node for a notice, and why (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.schedule import Allowance
from gpuwarden.domain.views import NodeView, PodView


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


#: The involuntary notices that a node is about to be lost, all handled as a Spot interruption.
LOSS_WARNINGS = {
    Kind.SPOT_INTERRUPTION: "spot interruption: the instance stops at the deadline",
    Kind.CAPACITY_RESERVATION_INTERRUPTION: "capacity reservation reclaimed: the instance stops at the deadline",
    Kind.CAPACITY_BLOCK_EXPIRY: "capacity block ending: EC2 terminates the block's instances at the deadline",
    Kind.CAPACITY_BLOCK_PLAN: "capacity block ending: planned drain before EC2 starts terminating the block",
}


def plan_interruption(
    kind: Kind,
    node: NodeView,
    pods: Sequence[PodView],
    policy: Policy,
    allowance: Allowance,
) -> NodePlan:
    """Spot warnings, rebalance recommendations and state changes (docs/events.md)."""
    replace = policy.replacement.enabled
    if kind in LOSS_WARNINGS:
        return NodePlan(True, True, replace, True, LOSS_WARNINGS[kind])
    if kind is Kind.INSTANCE_STOPPING:
        return NodePlan(False, False, False, False, "instance is stopping: record the loss")
    if kind is not Kind.REBALANCE:
        raise ValueError(f"not an interruption kind: {kind}")
    if policy.rebalance.action == "prepare":
        return NodePlan(True, True, replace, False, "rebalance: prepare (policy rebalance.action=prepare)")
    # a window's refusal is the reason given, whatever else would also refuse: the user configured it
    refused = window_refusal(allowance) or do_not_disrupt_reason(node, pods)
    if refused is not None:
        return NodePlan(True, True, replace, False, "rebalance: prepare only", refused=refused)
    return NodePlan(True, True, replace, True, "rebalance: drain (policy rebalance.action=drain)")
