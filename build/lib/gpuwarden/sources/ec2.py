"""aws.ec2 events: Spot interruption warning, rebalance recommendation, instance state change.

Shapes: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html,
.../rebalance-recommendations.html and .../monitoring-instance-state-changes.html.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from gpuwarden.domain.notice import SPOT_NOTICE_SECONDS, Kind

from ._common import Envelope, FrozenModel, InstanceId, NoticeBatch, add_seconds

Ec2Source = Literal["aws.ec2"]

# The states in which the instance, and the node on it, is lost.
LOSS_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class SpotWarningDetail(FrozenModel):
    instance_id: InstanceId = Field(alias="instance-id")
    instance_action: Literal["terminate", "stop", "hibernate"] = Field(alias="instance-action")


class SpotInterruptionWarning(Envelope):
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
        return NoticeBatch(route="interruption", notices=(notice,))


class RebalanceDetail(FrozenModel):
    instance_id: InstanceId = Field(alias="instance-id")


class RebalanceRecommendation(Envelope):
    source: Ec2Source
    detail_type: Literal["EC2 Instance Rebalance Recommendation"] = Field(alias="detail-type")
    detail: RebalanceDetail

    def to_batch(self) -> NoticeBatch:
        notice = self.notice(Kind.REBALANCE, instance_id=self.detail.instance_id)
        return NoticeBatch(route="interruption", notices=(notice,))


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
                route="interruption",
                notices=(),
                ignored=f"instance {instance_id} entered state {state!r}: not a loss of the instance",
                event_id=self.id,
            )
        notice = self.notice(
            Kind.INSTANCE_STOPPING,
            instance_id=instance_id,
            deadline=self.time,
            detail={"state": state},
        )
        return NoticeBatch(route="interruption", notices=(notice,))
