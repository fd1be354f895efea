"""`rebalance`: EC2's rebalance recommendation, a Spot instance at elevated risk (docs/events.md)."""

from dataclasses import replace

from gpuwarden.domain.decide import plan_rebalance
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.sources.ec2 import RebalanceRecommendation
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.REBALANCE,
    summary="an EC2 Spot instance is at elevated risk of interruption",
    voluntary=True,
    route="interruption",
    doc="docs/events.md#the-kinds",
    # no do-not-disrupt mark (nothing is evicted unless the policy drains), no second replacement
    hooks=replace(karpenter.REBALANCE, plan=plan_rebalance),
    handle=disrupt,
    switch="rebalance.enabled",
    models=(RebalanceRecommendation,),
    rules=lambda _: (rule_of("Rebalance", "EC2 instance rebalance recommendations", RebalanceRecommendation),),
    samples=("rebalance-recommendation.json",),
)
