"""Every input gpuwarden accepts, parsed into the domain.

- EventBridge events (``detail-type`` + ``source``) → :class:`NoticeBatch` of :class:`Notice`
- our Scheduler target input (``"gpuwarden": "budget-window"``) → :class:`WindowTick`
- a runbook payload (``action``, no ``detail-type``) → :class:`RunbookRequest`

Anything else, or anything malformed, raises :class:`~gpuwarden.domain.errors.InvalidEvent`
naming the offending fields; no other exception leaves these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, assert_never, get_args

from pydantic import Field, TypeAdapter, ValidationError

from gpuwarden.domain.errors import InvalidEvent

from ._common import NoticeBatch, invalid
from .capacity import CapacityBlockDelivered, CapacityBlockExpirationWarning
from .cloudwatch import AlarmContributorStateChange, AlarmStateChange
from .ec2 import (
    CapacityReservationInterruptionWarning,
    InstanceStateChange,
    RebalanceRecommendation,
    SpotInterruptionWarning,
)
from .health import HealthEvent
from .lenient import RECEIVED, with_aliases
from .routing import KIND_OF, Route, Rule, prefixes_of, route_of_detail_type, rule_for, rules, why_no_rule
from .runbook import RunbookRequest
from .scan import SCAN_MARKER, ScanTick
from .scheduler import MARKER, WindowTick
from .sns import AlertBatch, is_sns_event, parse_sns

__all__ = [
    "DETAIL_TYPES",
    "SCAN_MARKER",
    "AlertBatch",
    "InvalidEvent",
    "NoticeBatch",
    "Parsed",
    "Route",
    "Rule",
    "RunbookRequest",
    "ScanTick",
    "WindowTick",
    "is_sns_event",
    "parse_event",
    "parse_notices",
    "parse_runbook",
    "parse_scan_tick",
    "parse_sns",
    "parse_window_tick",
    "route_of",
]

Parsed = NoticeBatch | RunbookRequest | WindowTick | ScanTick | AlertBatch

EventModel = Annotated[
    SpotInterruptionWarning
    | RebalanceRecommendation
    | InstanceStateChange
    | CapacityReservationInterruptionWarning
    | CapacityBlockExpirationWarning
    | CapacityBlockDelivered
    | HealthEvent
    | AlarmStateChange
    | AlarmContributorStateChange,
    Field(discriminator="detail_type"),  # the models' Literal detail-types are the tags
]
"""The one discriminated union of the EventBridge events gpuwarden accepts."""


def _detail_types() -> tuple[str, ...]:
    union = get_args(EventModel)[0]
    return tuple(tag for m in get_args(union) for tag in get_args(m.model_fields["detail_type"].annotation))


DETAIL_TYPES = _detail_types()
"""The EventBridge detail-types gpuwarden accepts."""

_ACCEPTED_SHAPES = (
    "an EventBridge event (with 'detail-type' and 'source'), "
    f"a Scheduler input ({{'gpuwarden': '{MARKER}', 'action': …}} or {{'gpuwarden': '{SCAN_MARKER}'}}), "
    "a Lambda SNS event carrying an Alertmanager notification ({'Records': [{'Sns': …}]}), "
    "or a runbook payload ({'action': …, 'node' | 'instance_id': …})"
)


_EVENTS: TypeAdapter[EventModel] = TypeAdapter(EventModel)  # ~1 ms: it reuses the models' schemas


def _mapping(raw: object, what: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidEvent(
            f"{what} must be a JSON object, got {type(raw).__name__}",
            errors=[{"type": "dict_type", "loc": [], "msg": "Input should be a JSON object"}],
        )
    return raw


DEFAULT_RULES = rules()


def parse_notices(
    raw: object, *, deployed: Sequence[Rule] = DEFAULT_RULES, received: datetime | None = None
) -> NoticeBatch:
    """An EventBridge event → the notices it means (what the event-driven handlers call).

    Only what a ``deployed`` rule would deliver is parsed: any other event of a detail-type
    gpuwarden knows is ignored with the reason (a CPU alarm, an instance entering ``running``).
    ``received`` stands in for a loss warning's missing or unreadable ``time`` (default: now).
    """
    event = with_aliases(_mapping(raw, "an EventBridge event"))
    tag = event.get("detail-type")
    if not isinstance(tag, str) or tag not in DETAIL_TYPES:
        raise _unknown_detail_type(tag, event.get("source"))
    if rule_for(event, deployed) is None:
        kind = KIND_OF[tag]
        event_id = event.get("id")
        return NoticeBatch(
            route=route_of_detail_type(tag, deployed),
            notices=(),
            ignored=why_no_rule(event, kind, prefixes_of(deployed)),
            event_id=event_id if isinstance(event_id, str) and 0 < len(event_id) <= 128 else None,
            kind=kind,
        )
    try:
        model = _EVENTS.validate_python(event, context={RECEIVED: received or datetime.now(UTC)})
        return model.to_batch()
    except ValidationError as error:
        raise invalid(f"{tag} event", error, drop_tag=tag) from None


def _unknown_detail_type(tag: object, source: object) -> InvalidEvent:
    shown = repr(tag)[:100]
    origin = f" from {repr(source)[:100]}" if source is not None else ""
    expected = ", ".join(DETAIL_TYPES)
    msg = f"detail-type {shown}{origin} is not one gpuwarden handles; expected one of: {expected}"
    return InvalidEvent(
        f"EventBridge event does not parse: {msg}",
        errors=[{"type": "unknown_detail_type", "loc": ["detail-type"], "msg": msg}],
    )


def parse_runbook(raw: object) -> RunbookRequest:
    try:
        return RunbookRequest.model_validate(_mapping(raw, "a runbook request"))
    except ValidationError as error:
        raise invalid("runbook request", error) from None


def parse_window_tick(raw: object) -> WindowTick:
    try:
        return WindowTick.model_validate(_mapping(raw, "a Scheduler input"))
    except ValidationError as error:
        raise invalid("Scheduler input", error) from None


def parse_scan_tick(raw: object) -> ScanTick:
    try:
        return ScanTick.model_validate(_mapping(raw, "a Scheduler input"))
    except ValidationError as error:
        raise invalid("Scheduler input", error) from None


def parse_event(raw: object, *, deployed: Sequence[Rule] = DEFAULT_RULES) -> Parsed:
    """Any input, routed by its shape exactly as the deployed rules and invokes would."""
    event = with_aliases(_mapping(raw, "an event"))
    if "detail-type" in event and "source" in event:
        return parse_notices(event, deployed=deployed)
    if event.get("gpuwarden") == SCAN_MARKER:
        return parse_scan_tick(event)
    if "gpuwarden" in event:
        return parse_window_tick(event)
    if is_sns_event(event):
        return parse_sns(event)
    if "action" in event:
        return parse_runbook(event)
    raise InvalidEvent(
        f"unrecognised input: expected {_ACCEPTED_SHAPES}",
        errors=[{"type": "unknown_shape", "loc": [], "msg": f"expected {_ACCEPTED_SHAPES}"}],
    )


def route_of(parsed: Parsed) -> Route:
    """The handler module a parsed input goes to."""
    if isinstance(parsed, NoticeBatch):
        return parsed.route
    if isinstance(parsed, WindowTick):
        return "windows"
    if isinstance(parsed, RunbookRequest):
        return "runbook"
    if isinstance(parsed, ScanTick | AlertBatch):
        return "gpu_idle"  # the GPU function takes the scan and the Alertmanager topic too
    assert_never(parsed)
