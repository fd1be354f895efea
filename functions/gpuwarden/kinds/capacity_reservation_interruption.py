"""`capacity-reservation-interruption`: an interruptible Capacity Reservation reclaimed (docs/events.md)."""

from gpuwarden.domain.decide import loss_warning
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.hooks import Admission, KindHooks
from gpuwarden.sources.ec2 import CapacityReservationInterruptionWarning
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.CAPACITY_RESERVATION_INTERRUPTION,
    summary="an interruptible Capacity Reservation is reclaimed: the instance stops at the deadline",
    voluntary=False,
    route="interruption",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(
            plan=loss_warning("capacity reservation reclaimed: the instance stops at the deadline"),
            guard=karpenter.not_stale,
        ),
        delivery=karpenter.INVOLUNTARY,
    ),
    handle=disrupt,
    models=(CapacityReservationInterruptionWarning,),
    rules=lambda _: (
        rule_of(
            "CapacityReservationInterruption",
            "interruptible Capacity Reservations reclaiming an instance",
            CapacityReservationInterruptionWarning,
        ),
    ),
    samples=(
        "capacity-reservation-interruption.json",
        "capacity-reservation-interruption-interruptible-spelling.json",
        "capacity-reservation-interruption-karpenter.json",
    ),
)
