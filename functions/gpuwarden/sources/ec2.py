"""aws.ec2 events: Spot interruption warning, rebalance recommendation, instance state change,
interruptible Capacity Reservation interruption warning.

Shapes: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html,
.../rebalance-recommendations.html, .../monitoring-instance-state-changes.html and
.../monitor-interruptible-cr.html. The warnings are read leniently (`sources.lenient`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from gpuwarden.domain.notice import SPOT_NOTICE_SECONDS, Kind

from ._common import Envelope, FrozenModel, InstanceId, NoticeBatch, add_seconds, detail_of, instance_id_in, shown
from .lenient import LossWarning, readable_time
from .rules import Rule

Ec2Source = Literal["aws.ec2"]

#: EC2 states after which the instance is gone or going (`instance-stopping`).
STOPPING_STATES = ("stopping", "stopped", "shutting-down", "terminated")
# The states in which the instance, and the node on it, is lost.
LOSS_STATES = frozenset(STOPPING_STATES)
InstanceAction = Literal["terminate", "stop", "hibernate"]


def _action(value: object) -> object:
    """An action gpuwarden does not know (or none) is read as terminate: the instance is lost."""
    return value if value in ("terminate", "stop", "hibernate") else "terminate"


LenientAction = Annotated[InstanceAction, BeforeValidator(_action)]


class SpotWarningDetail(FrozenModel):
    instance_id: InstanceId = Field(alias="instance-id")
    instance_action: LenientAction = Field("terminate", alias="instance-action")


class _InstanceWarning(LossWarning):
    """A loss warning naming one instance: in ``detail.instance-id``, else in ``resources``."""

    target_key: ClassVar[str | None] = "instance-id"

    @staticmethod
    def target_in(resource: str) -> str | None:
        return instance_id_in(resource)


class SpotInterruptionWarning(_InstanceWarning):
    source: Ec2Source
    detail_type: Literal["EC2 Spot Instance Interruption Warning"] = Field(alias="detail-type")
    detail: SpotWarningDetail

    @property
    def deadline(self) -> datetime:
        """Two minutes after the event; hibernation "begins immediately" (EC2 docs), so: now."""
        if self.detail.instance_action == "hibernate":
            return self.time
        return add_seconds(self.time, SPOT_NOTICE_SECONDS, field="time")

    def to_batch(self) -> NoticeBatch:
        notice = self.notice(
            Kind.SPOT_INTERRUPTION,
            instance_id=self.detail.instance_id,
            deadline=self.deadline,
            detail={"instance_action": self.detail.instance_action},
        )
        return NoticeBatch(notices=(notice,), kind=Kind.SPOT_INTERRUPTION)


def _readable(value: object) -> datetime | None:
    return readable_time(value)


class ReservationWarningDetail(SpotWarningDetail):
    termination_time: Annotated[datetime | None, BeforeValidator(_readable)] = Field(
        None, alias="instance-termination-time"
    )


class CapacityReservationInterruptionWarning(_InstanceWarning):
    """An interruptible Capacity Reservation is being reclaimed: the instance stops in 2 minutes."""

    source: Ec2Source
    detail_type: Literal[
        "EC2 Capacity Reservation Instance Interruption Warning",
        "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
    ] = Field(alias="detail-type")
    detail: ReservationWarningDetail

    @property
    def deadline(self) -> datetime:
        """``detail.instance-termination-time`` when it can be read, else two minutes after the event."""
        return self.detail.termination_time or add_seconds(self.time, SPOT_NOTICE_SECONDS, field="time")

    def to_batch(self) -> NoticeBatch:
        kind = Kind.CAPACITY_RESERVATION_INTERRUPTION
        notice = self.notice(
            kind,
            instance_id=self.detail.instance_id,
            deadline=self.deadline,
            detail={"instance_action": self.detail.instance_action},
        )
        return NoticeBatch(notices=(notice,), kind=kind)


class RebalanceDetail(FrozenModel):
    instance_id: InstanceId = Field(alias="instance-id")


class RebalanceRecommendation(Envelope):
    source: Ec2Source
    detail_type: Literal["EC2 Instance Rebalance Recommendation"] = Field(alias="detail-type")
    detail: RebalanceDetail

    def to_batch(self) -> NoticeBatch:
        notice = self.notice(Kind.REBALANCE, instance_id=self.detail.instance_id)
        return NoticeBatch(notices=(notice,), kind=Kind.REBALANCE)


class StateChangeDetail(FrozenModel):
    instance_id: InstanceId = Field(alias="instance-id")
    state: Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]


class InstanceStateChange(Envelope):
    source: Ec2Source
    detail_type: Literal["EC2 Instance State-change Notification"] = Field(alias="detail-type")
    detail: StateChangeDetail

    def to_batch(self) -> NoticeBatch:
        state, instance_id = self.detail.state, self.detail.instance_id
        if state not in LOSS_STATES:
            return NoticeBatch(
                notices=(),
                ignored=f"instance {instance_id} entered state {state!r}: not a loss of the instance",
                event_id=self.id,
                kind=Kind.INSTANCE_STOPPING,
            )
        notice = self.notice(
            Kind.INSTANCE_STOPPING,
            instance_id=instance_id,
            deadline=self.time,
            detail={"state": state},
        )
        return NoticeBatch(notices=(notice,), kind=Kind.INSTANCE_STOPPING)


def why_not_lost(event: Mapping[str, Any], deployed: Sequence[Rule]) -> str | None:
    """Why the instance-stopping rule does not take this state change."""
    if event.get("source") != "aws.ec2":
        return None
    detail = detail_of(event)
    instance, state = shown(detail.get("instance-id")), shown(detail.get("state"))
    return f"instance {instance} entered state {state}: not a loss of the instance"
