"""`rebalance`: EC2's rebalance recommendation, a Spot instance at elevated risk (docs/events.md)."""

from collections.abc import Sequence
from typing import Literal

from gpuwarden.domain.decide import AskWindows, NodePlan
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Frozen, Policy, section_of
from gpuwarden.domain.protections import do_not_disrupt_refusal
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.kinds.spec import KindSpec, PolicySection
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.hooks import Admission, Delivery, KindHooks
from gpuwarden.sources.ec2 import RebalanceRecommendation
from gpuwarden.sources.rules import rule_of


class RebalancePolicy(Frozen):
    enabled: bool = True
    action: Literal["prepare", "drain"] = "prepare"


def plan_rebalance(node: NodeView, pods: Sequence[PodView], policy: Policy, windows: AskWindows) -> NodePlan:
    """Prepare the node (taint, replacement, checkpoint requests), and drain it only where the
    policy says ``drain`` and neither a window, the NodePool's budgets nor do-not-disrupt refuses."""
    replace = policy.replacement.enabled
    if section_of(policy, RebalancePolicy).action == "prepare":
        return NodePlan(True, replace, False, "rebalance: prepare (policy rebalance.action=prepare)")
    # a window's (then a budget's) refusal is the reason given, whatever else would also refuse
    refused = windows().refused or do_not_disrupt_refusal(Kind.REBALANCE, node, pods)
    if refused is not None:
        return NodePlan(True, replace, False, "rebalance: prepare only", refused=refused)
    return NodePlan(True, replace, True, "rebalance: drain (policy rebalance.action=drain)")


SPEC = KindSpec(
    kind=Kind.REBALANCE,
    summary="an EC2 Spot instance is at elevated risk of interruption",
    voluntary=True,
    route="interruption",
    doc="docs/events.md#the-kinds",
    # no do-not-disrupt mark (nothing is evicted unless the policy drains), no second replacement
    hooks=KindHooks(
        admission=Admission(plan=plan_rebalance),
        delivery=Delivery(replacement_guard=karpenter.left_to_karpenter, claim_with_mark=True, hand_off_at_once=True),
    ),
    handle=disrupt,
    switch="rebalance.enabled",
    policy=PolicySection("rebalance", RebalancePolicy),
    models=(RebalanceRecommendation,),
    rules=lambda _: (rule_of("Rebalance", "EC2 instance rebalance recommendations", RebalanceRecommendation),),
    samples=("rebalance-recommendation.json",),
)
