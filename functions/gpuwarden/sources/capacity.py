"""aws.ec2 Capacity Blocks for ML: the block is delivered, and the block is about to end.

Shape: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html. Both
events name a Capacity Reservation (``detail.capacity-reservation-id``, or its ARN in
``resources``), never an instance. Forty minutes before the block ends EC2 sends the
expiration warning; ten minutes later it starts terminating every instance in the block.
Both are read with the lenient envelope: the page prints them with ``detail_type``,
``customer_event_id`` and no region.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field

from gpuwarden.domain.notice import CAPACITY_BLOCK_TERMINATION_LEAD_SECONDS, CAPACITY_BLOCK_WARNING_SECONDS, Kind

from ._common import FrozenModel, NoticeBatch, add_seconds
from .lenient import LossWarning, readable_time

RESERVATION_ID_RE = re.compile(r"^cr-[0-9a-zA-Z]{1,32}$")
_RESERVATION_IN_VALUE_RE = re.compile(r"(?:^|:capacity-reservation/)(cr-[0-9a-zA-Z]{1,32})\Z")

ReservationId = Annotated[str, Field(pattern=RESERVATION_ID_RE.pattern, max_length=35)]


def reservation_id_in(value: str) -> str | None:
    """The reservation id in ``cr-…`` or ``arn:aws:ec2:…:capacity-reservation/cr-…``."""
    match = _RESERVATION_IN_VALUE_RE.search(value)
    return match.group(1) if match else None


def termination_start(end: datetime) -> datetime:
    """When EC2 starts terminating a Capacity Block's instances: 30 minutes before it ends."""
    return end - timedelta(seconds=CAPACITY_BLOCK_TERMINATION_LEAD_SECONDS)


def _end_date(value: object) -> object:
    """A readable end date; absent or empty is None (the block is then looked up in EC2)."""
    if value is None or value == "":
        return None
    return readable_time(value) or value  # anything else is reported as an invalid datetime


class BlockDetail(FrozenModel):
    capacity_reservation_id: ReservationId = Field(alias="capacity-reservation-id")
    end_date: Annotated[datetime | None, BeforeValidator(_end_date)] = Field(None, alias="end-date")


class _BlockEvent(LossWarning):
    source: Literal["aws.ec2"]
    detail: BlockDetail

    target_key: ClassVar[str | None] = "capacity-reservation-id"

    @staticmethod
    def target_in(resource: str) -> str | None:
        return reservation_id_in(resource)


class CapacityBlockExpirationWarning(_BlockEvent):
    """Every node of the cluster in the block is lost 10 minutes after this warning."""

    detail_type: Literal["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"] = Field(
        alias="detail-type"
    )

    def to_batch(self) -> NoticeBatch:
        kind = Kind.CAPACITY_BLOCK_EXPIRY
        end = self.detail.end_date
        notice = self.notice(
            kind,
            capacity_reservation_id=self.detail.capacity_reservation_id,
            deadline=add_seconds(self.time, CAPACITY_BLOCK_WARNING_SECONDS, field="time"),
            detail={"end_date": end.isoformat() if end else None},
        )
        return NoticeBatch(notices=(notice,), kind=kind)


class CapacityBlockDelivered(_BlockEvent):
    """The block is ready: plan its nodes' drain before EC2 starts terminating them."""

    detail_type: Literal["Capacity Block Delivered", "Capacity Block Reservation Delivered"] = Field(
        alias="detail-type"
    )

    def to_batch(self) -> NoticeBatch:
        kind = Kind.CAPACITY_BLOCK_PLAN
        end = self.detail.end_date
        notice = self.notice(
            kind,
            capacity_reservation_id=self.detail.capacity_reservation_id,
            deadline=termination_start(end) if end else None,
            detail={"end_date": end.isoformat() if end else None},
        )
        return NoticeBatch(notices=(notice,), kind=kind)
