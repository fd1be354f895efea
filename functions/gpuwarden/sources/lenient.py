"""The envelope of a warning that a node is about to be lost, read leniently (docs/events.md).

Spot interruption, interruptible Capacity Reservation and Capacity Block warnings are never
dropped for a field gpuwarden does not need: a missing, empty or unreadable ``time`` is the
time the event was received, a missing ``id`` is derived from the event itself (so a
re-delivery is still a duplicate), ``account``, ``region``, ``version`` and ``resources`` are
taken when they make sense and ignored when they do not, unknown fields are ignored. AWS's
own pages print these events with ``detail_type`` / ``customer_event_id`` and no region or
version; the peers' test suites send an empty ``time``. What the warning must name — the
instance, or the reservation — is still required.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import AwareDatetime, Field, TypeAdapter, ValidationError, ValidationInfo, model_validator

from ._common import MAX_EVENT_ID, Envelope, _http_date_or_iso

#: Top-level spellings found in AWS's documentation samples → the EventBridge envelope's own.
ALIASES = {"detail_type": "detail-type", "customer_event_id": "id"}
RECEIVED = "received"

_MAX_RESOURCE = 2048
_TIME: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)


def with_aliases(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The event with AWS's documentation spellings of envelope keys read as the real ones."""
    renamed = {ALIASES[k]: v for k, v in event.items() if k in ALIASES and ALIASES[k] not in event}
    if not renamed:
        return event
    return {**{k: v for k, v in event.items() if k not in ALIASES}, **renamed}


def received_at(info: ValidationInfo) -> datetime:
    context = info.context if isinstance(info.context, Mapping) else {}
    received = context.get(RECEIVED)
    return received if isinstance(received, datetime) else datetime.now(UTC)


def readable_time(value: object) -> datetime | None:
    """An aware time from ISO 8601 or RFC 2822 (naive means UTC); None when it cannot be read."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    candidate = _http_date_or_iso(value.strip())
    if isinstance(candidate, datetime):
        return candidate
    try:
        return _TIME.validate_python(candidate)
    except ValidationError:
        pass
    try:
        naive = datetime.fromisoformat(str(candidate))
    except ValueError:
        return None
    return naive if naive.tzinfo is not None else naive.replace(tzinfo=UTC)


def _derived_id(event: Mapping[str, Any]) -> str:
    canonical = json.dumps({k: v for k, v in event.items() if k != "time"}, sort_keys=True, default=str)
    return "derived-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _text_or_none(value: object, limit: int = 64) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _resources(value: object) -> list[str]:
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [r for r in items[:1000] if isinstance(r, str) and len(r) <= _MAX_RESOURCE]


class LossWarning(Envelope):
    """The lenient envelope: everything but ``source``, ``detail-type`` and ``detail`` has a fallback."""

    account: Annotated[str, Field(max_length=64)] | None = None  # type: ignore[assignment]
    region: Annotated[str, Field(max_length=64)] | None = None  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _lenient_envelope(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping):
            return data
        event = dict(with_aliases(data))
        event["time"] = readable_time(event.get("time")) or received_at(info)
        raw_id = event.get("id")
        if not isinstance(raw_id, str) or not raw_id.strip() or len(raw_id) > MAX_EVENT_ID:
            event["id"] = _derived_id(data)
        event["version"] = _text_or_none(event.get("version"), 16) or "0"
        event["account"] = _text_or_none(event.get("account"))
        event["region"] = _text_or_none(event.get("region"))
        event["resources"] = _resources(event.get("resources"))
        if not isinstance(event.get("detail"), Mapping):
            event["detail"] = {}
        return cls.complete(event)

    #: The detail key naming what the warning is about (an instance, a reservation); when it is
    #: absent, the first ``resources`` entry that `target_in` reads fills it.
    target_key: ClassVar[str | None] = None

    @staticmethod
    def target_in(resource: str) -> str | None:
        """What one ``resources`` entry names, in the form `target_key` takes (subclasses)."""
        return None

    @classmethod
    def complete(cls, event: dict[str, Any]) -> dict[str, Any]:
        """Fill the warning's target from ``resources`` when its detail does not name it."""
        detail, key = event["detail"], cls.target_key
        if key is None or detail.get(key) is not None:
            return event
        found = next((t for t in map(cls.target_in, event["resources"]) if t), None)
        if found:
            event["detail"] = {**detail, key: found}
        return event
