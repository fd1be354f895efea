"""`capacity-block-expiry`: a Capacity Block for ML ends; EC2 terminates its instances (docs/events.md)."""

from gpuwarden.domain.decide import loss_warning
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.capacity_blocks.use_case import handle_block_expiry
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.hooks import Admission, KindHooks
from gpuwarden.sources.capacity import CapacityBlockExpirationWarning
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.CAPACITY_BLOCK_EXPIRY,
    summary="a Capacity Block ends: EC2 terminates every instance in it in ten minutes",
    voluntary=False,
    route="interruption",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(
            plan=loss_warning("capacity block ending: EC2 terminates the block's instances at the deadline"),
            guard=karpenter.not_stale,
        ),
        delivery=karpenter.INVOLUNTARY,
    ),
    handle=handle_block_expiry,  # every node of the block, each as a Spot warning
    models=(CapacityBlockExpirationWarning,),
    rules=lambda _: (
        rule_of(
            "CapacityBlockExpiry",
            "Capacity Blocks for ML about to end (instances terminate in 10 minutes)",
            CapacityBlockExpirationWarning,
        ),
    ),
    samples=("capacity-block-expiration-warning.json", "capacity-block-reservation-expiration-warning.json"),
)
