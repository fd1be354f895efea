"""aws.health "AWS Health Event": EC2 scheduled changes (retirement, maintenance).

Shape: https://docs.aws.amazon.com/health/latest/ug/aws-health-events-eventbridge-schema.html.
Times in ``detail`` are RFC 2822 dates ("Fri, 05 Jun 2026 05:00:00 GMT"), not ISO 8601.
``affectedEntities[].entityValue`` is an instance id or an instance ARN; older events name
the instances only in the envelope's ``resources``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from gpuwarden.domain.notice import Kind

from ._common import (
    Envelope,
    FrozenModel,
    Name,
    NoticeBatch,
    OptionalHttpDate,
    detail_of,
    instance_id_in,
    keyed,
    shown,
)
from .rules import Rule

_ARN = Annotated[str, Field(min_length=1, max_length=1600)]


class AffectedEntity(FrozenModel):
    entity_value: _ARN = Field(alias="entityValue")
    status: Name | None = None


class HealthDetail(FrozenModel):
    # Karpenter's own tests send scheduled changes with an empty eventArn, eventTypeCode and
    # startTime: a change whose start is unknown is drained now (no deadline to plan against).
    event_arn: Annotated[str, Field(max_length=1600)] = Field("", alias="eventArn")
    service: Name
    event_type_code: Annotated[str, Field(max_length=256)] = Field("", alias="eventTypeCode")
    event_type_category: Name = Field(alias="eventTypeCategory")
    start_time: OptionalHttpDate = Field(None, alias="startTime")
    end_time: OptionalHttpDate = Field(None, alias="endTime")
    status_code: Name | None = Field(None, alias="statusCode")
    event_region: Name | None = Field(None, alias="eventRegion")
    affected_entities: list[AffectedEntity] = Field(default_factory=list, alias="affectedEntities", max_length=10_000)
    backup_event: bool = Field(False, alias="backupEvent")


class HealthEvent(Envelope):
    source: Literal["aws.health"]
    detail_type: Literal["AWS Health Event"] = Field(alias="detail-type")
    detail: HealthDetail

    def instance_ids(self) -> tuple[str, ...]:
        """The affected instances, in order, once each: entities first, else ``resources``."""
        from_entities = [instance_id_in(e.entity_value) for e in self.detail.affected_entities]
        found = [i for i in from_entities if i] or [i for i in map(instance_id_in, self.resources) if i]
        return tuple(dict.fromkeys(found))

    def to_batch(self) -> NoticeBatch:
        d = self.detail
        if d.service != "EC2" or d.event_type_category != "scheduledChange":
            return self._ignored(
                f"AWS Health event {d.event_type_code} (service {d.service}, category "
                f"{d.event_type_category}) is not an EC2 scheduled change"
            )
        if d.status_code == "closed":
            return self._ignored(f"AWS Health event {d.event_type_code} is closed: nothing is scheduled")
        instances = self.instance_ids()
        if not instances:
            return self._ignored(f"AWS Health event {d.event_type_code} names no EC2 instance")
        detail = {
            "event_type_code": d.event_type_code,
            "event_arn": d.event_arn,
            "end_time": d.end_time,
            "status_code": d.status_code,
            "backup_event": d.backup_event,
        }
        notices = tuple(
            self.notice(
                Kind.SCHEDULED_MAINTENANCE,
                event_id=keyed(self.id, instance_id),
                instance_id=instance_id,
                deadline=d.start_time,
                detail=detail,
            )
            for instance_id in instances
        )
        return NoticeBatch(notices=notices, kind=Kind.SCHEDULED_MAINTENANCE)

    def _ignored(self, reason: str) -> NoticeBatch:
        return NoticeBatch(notices=(), ignored=reason, event_id=self.id, kind=Kind.SCHEDULED_MAINTENANCE)


def why_not_scheduled_change(event: Mapping[str, Any], deployed: Sequence[Rule]) -> str | None:
    """Why the scheduled-maintenance rule does not take this AWS Health event."""
    if event.get("source") != "aws.health":
        return None
    d = detail_of(event)
    return (
        f"AWS Health event {shown(d.get('eventTypeCode'))} (service {shown(d.get('service'))}, "
        f"category {shown(d.get('eventTypeCategory'))}) is not an EC2 scheduled change"
    )
