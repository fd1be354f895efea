"""Every input gpuwarden accepts, parsed and routed as deployed (docs/events.md).

- an EventBridge event → the registry's one discriminated union of the kinds' source models →
  :class:`NoticeBatch`; only what a deployed rule would deliver is parsed
- a Scheduler input → :class:`SchedulerTick` or :class:`ScanTick`; an SNS event → :class:`AlertBatch`;
  a runbook payload → :class:`RunbookRequest`

Anything else, or anything malformed, raises :class:`~gpuwarden.domain.errors.InvalidEvent`
naming the offending fields; no other exception leaves these functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import reduce
from operator import or_
from typing import Annotated, Any, cast

from pydantic import Field, TypeAdapter, ValidationError

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.kinds.registry import KIND_OF, SPECS, TICK_ACTIONS, rules, spec_of
from gpuwarden.sources import (
    SCAN_MARKER,
    AlertBatch,
    NoticeBatch,
    Rule,
    RunbookRequest,
    ScanTick,
    SchedulerTick,
    as_mapping,
    is_sns_event,
    parse_runbook,
    parse_scan_tick,
    parse_sns,
)
from gpuwarden.sources._common import invalid, shown
from gpuwarden.sources.lenient import RECEIVED, with_aliases
from gpuwarden.sources.rules import rule_for
from gpuwarden.sources.ticks import MARKER

Parsed = NoticeBatch | RunbookRequest | SchedulerTick | ScanTick | AlertBatch

_MODELS = tuple(model for spec in SPECS for model in spec.models)
#: The one discriminated union of the EventBridge events gpuwarden accepts: every kind's models,
#: tagged by their Literal detail-types (~1 ms to build: it reuses the models' schemas).
_EVENTS: TypeAdapter[Any] = TypeAdapter(cast(Any, Annotated[reduce(or_, _MODELS), Field(discriminator="detail_type")]))

#: The EventBridge detail-types gpuwarden accepts.
DETAIL_TYPES: tuple[str, ...] = tuple(KIND_OF)

_ACCEPTED_SHAPES = (
    "an EventBridge event (with 'detail-type' and 'source'), "
    f"a Scheduler input ({{'gpuwarden': '{MARKER}', 'action': …}} or {{'gpuwarden': '{SCAN_MARKER}'}}), "
    "a Lambda SNS event carrying an Alertmanager notification ({'Records': [{'Sns': …}]}), "
    "or a runbook payload ({'action': …, 'node' | 'instance_id': …})"
)

DEFAULT_RULES = rules()


def parse_notices(
    raw: object, *, deployed: Sequence[Rule] = DEFAULT_RULES, received: datetime | None = None
) -> NoticeBatch:
    """An EventBridge event → the notices it means (what the event-driven handlers call).

    Only what a ``deployed`` rule would deliver is parsed: any other event of a detail-type
    gpuwarden knows is ignored with the reason (a CPU alarm, an instance entering ``running``).
    ``received`` stands in for a loss warning's missing or unreadable ``time`` (default: now).
    """
    event = with_aliases(as_mapping(raw, "an EventBridge event"))
    tag = event.get("detail-type")
    if not isinstance(tag, str) or tag not in KIND_OF:
        raise _unknown_detail_type(tag, event.get("source"))
    if rule_for(event, deployed) is None:
        kind = KIND_OF[tag]
        why = spec_of(kind).why_ignored
        event_id = event.get("id")
        return NoticeBatch(
            notices=(),
            ignored=(why(event, deployed) if why is not None else None) or _no_rule(event, tag),
            event_id=event_id if isinstance(event_id, str) and 0 < len(event_id) <= 128 else None,
            kind=kind,
        )
    try:
        model = _EVENTS.validate_python(event, context={RECEIVED: received or datetime.now(UTC)})
        batch: NoticeBatch = model.to_batch()
        return batch
    except ValidationError as error:
        raise invalid(f"{tag} event", error, drop_tag=tag) from None


def _no_rule(event: Any, tag: str) -> str:
    return f"no deployed rule takes a {tag!r} event from source {shown(event.get('source'))}"


def _unknown_detail_type(tag: object, source: object) -> InvalidEvent:
    what = repr(tag)[:100]
    origin = f" from {repr(source)[:100]}" if source is not None else ""
    expected = ", ".join(DETAIL_TYPES)
    msg = f"detail-type {what}{origin} is not one gpuwarden handles; expected one of: {expected}"
    return InvalidEvent(
        f"EventBridge event does not parse: {msg}",
        errors=[{"type": "unknown_detail_type", "loc": ["detail-type"], "msg": msg}],
    )


def parse_scheduler_tick(raw: object) -> SchedulerTick:
    """A Scheduler input of the scheduled function, whose action is one a kind runs."""
    try:
        tick = SchedulerTick.model_validate(as_mapping(raw, "a Scheduler input"))
    except ValidationError as error:
        raise invalid("Scheduler input", error) from None
    if tick.action not in TICK_ACTIONS:
        msg = f"action {tick.action!r} is not one gpuwarden runs; expected one of: {', '.join(TICK_ACTIONS)}"
        raise InvalidEvent(
            f"Scheduler input does not parse: {msg}", errors=[{"type": "unknown_action", "loc": ["action"], "msg": msg}]
        )
    return tick


def parse_event(raw: object, *, deployed: Sequence[Rule] = DEFAULT_RULES) -> Parsed:
    """Any input, routed by its shape exactly as the deployed rules and invokes would."""
    event = with_aliases(as_mapping(raw, "an event"))
    if "detail-type" in event and "source" in event:
        return parse_notices(event, deployed=deployed)
    if event.get("gpuwarden") == SCAN_MARKER:
        return parse_scan_tick(event)
    if "gpuwarden" in event:
        return parse_scheduler_tick(event)
    if is_sns_event(event):
        return parse_sns(event)
    if "action" in event:
        return parse_runbook(event)
    raise InvalidEvent(
        f"unrecognised input: expected {_ACCEPTED_SHAPES}",
        errors=[{"type": "unknown_shape", "loc": [], "msg": f"expected {_ACCEPTED_SHAPES}"}],
    )
