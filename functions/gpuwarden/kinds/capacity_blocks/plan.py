"""`capacity-block-plan`: a Capacity Block's nodes drained before EC2 ends the block (docs/events.md)."""

from gpuwarden.domain.decide import loss_warning
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.capacity_blocks import policy
from gpuwarden.kinds.capacity_blocks import use_case as capacity
from gpuwarden.kinds.spec import KindSpec, plan_due
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.hooks import Admission, KindHooks
from gpuwarden.sources.capacity import CapacityBlockDelivered
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.CAPACITY_BLOCK_PLAN,
    summary="a Capacity Block is in use: its nodes' drain is planned before EC2 starts terminating them",
    voluntary=False,  # the planned drain is involuntary, its deadline the start of termination
    route="planning",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(
            plan=loss_warning("capacity block ending: planned drain before EC2 starts terminating the block")
        ),
        delivery=karpenter.INVOLUNTARY,
    ),
    handle=capacity.handle_block_delivered,
    switch="capacity_blocks.enabled",
    policy=policy.SECTION,  # the family's one section (`policy`): the expiry warning has no settings
    models=(CapacityBlockDelivered,),
    rules=lambda _: (
        rule_of(
            "CapacityBlockDelivered",
            "Capacity Blocks for ML delivered: plan the drain before the block ends",
            CapacityBlockDelivered,
        ),
    ),
    samples=("capacity-block-delivered.json", "capacity-block-reservation-delivered.json"),
    ticks={capacity.DUE_ACTION: plan_due(capacity.run_block_plan)},  # read the block again: drain, or move the plan
    reconcile=capacity.reconcile_blocks,  # the blocks the cluster's nodes run in, planned (a missed delivery)
)
