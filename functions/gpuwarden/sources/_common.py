"""What every source model shares: the EventBridge envelope, ids, times, error conversion.

Only ``aws_lambda_powertools.utilities.parser.models.event_bridge`` is imported from
Powertools (the models package loads its modules lazily, so no other event schema is built).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Annotated, Any

from aws_lambda_powertools.utilities.parser.models.event_bridge import EventBridgeModel
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.domain.notice import Kind, Notice


@dataclass(frozen=True)
class NoticeBatch:
    """The notices one EventBridge event turns into (their kind's spec says which function takes them).

    ``ignored`` is the reason when the event is well-formed but asks nothing of gpuwarden
    (an AWS Health event for another service, an instance entering ``running``…); then
    ``notices`` is empty.
    """

    notices: tuple[Notice, ...]
    #: The contract kind the event is reported as, even when it is ignored.
    kind: Kind
    ignored: str | None = None
    #: The envelope's id, so that an ignored event is recorded in the ledger too.
    event_id: str | None = None


INSTANCE_ID_RE = re.compile(r"^i-[0-9a-f]{8}([0-9a-f]{9})?$")
# An instance id on its own, or at the end of an ARN (arn:aws:ec2:<region>:<account>:instance/i-…).
_INSTANCE_IN_VALUE_RE = re.compile(r"(?:^|:instance/)(i-[0-9a-f]{8}(?:[0-9a-f]{9})?)\Z")
# Kubernetes node names are DNS-1123 subdomains.
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

MAX_EVENT_ID = 128
MAX_NAME = 256
MAX_TEXT = 4096
_MAX_NOTICE_EVENT_ID = 256  # Notice.event_id max_length


def _check_node_name(value: str) -> str:
    if not DNS1123_SUBDOMAIN_RE.fullmatch(value):
        raise ValueError(
            "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return value


InstanceId = Annotated[str, Field(pattern=INSTANCE_ID_RE.pattern, max_length=19)]
NodeName = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_check_node_name)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]


def _http_date_or_iso(value: object) -> object:
    """AWS Health writes times as RFC 2822 dates ("Fri, 05 Jun 2026 05:00:00 GMT").

    The documented samples carry wrong weekdays and one-digit days ("Fri, 3 Jun 2022"),
    so the weekday is ignored. Anything that is not such a date goes on to pydantic's own
    ISO 8601 parsing.
    """
    if not isinstance(value, str) or not value[:1].isalpha():
        return value
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return value  # pydantic reports it as an invalid datetime, with the field name
    # "-0000" (UTC, source zone unknown) parses to a naive datetime: it is UTC all the same.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


HttpDate = Annotated[AwareDatetime, BeforeValidator(_http_date_or_iso)]


def _empty_to_none(value: object) -> object:
    return None if value == "" else value


OptionalHttpDate = Annotated[HttpDate | None, BeforeValidator(_empty_to_none)]


class Envelope(EventBridgeModel):
    """Powertools' EventBridge envelope, tightened: frozen, bounded, time zone required.

    Defaults where AWS's own documented samples leave a field out: ``version`` (the EC2
    state-change sample) and ``resources`` (the AWS Health instance-retirement sample).
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    version: str = Field("0", max_length=16)
    id: str = Field(min_length=1, max_length=MAX_EVENT_ID)
    time: AwareDatetime
    account: str = Field(max_length=64)
    region: str = Field(max_length=64)
    resources: list[Annotated[str, Field(max_length=2048)]] = Field(default_factory=list, max_length=1000)

    def to_batch(self) -> NoticeBatch:
        """The domain notices this event means (each source model implements it)."""
        raise NotImplementedError

    def notice(self, kind: Kind, **fields: Any) -> Notice:
        """A Notice carrying this envelope's id, time, source, detail-type, region and account."""
        fields.setdefault("event_id", self.id)
        return Notice(
            kind=kind,
            event_time=self.time,
            source=self.source,
            detail_type=self.detail_type,
            region=self.region,
            account=self.account,
            **fields,
        )


class FrozenModel(BaseModel):
    """Base of the ``detail`` models: frozen, extra fields (AWS adds them) ignored."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


def shown(value: Any, limit: int = 100) -> str:
    """A value from an event, quoted and cut short, for a reason that names it."""
    return repr(value)[:limit]


def detail_of(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """An event's ``detail`` (empty when it has none, or it is not an object)."""
    detail = event.get("detail")
    return detail if isinstance(detail, Mapping) else {}


def instance_id_in(value: str) -> str | None:
    """The instance id in ``i-…`` or ``arn:aws:ec2:…:instance/i-…``; None for anything else."""
    match = _INSTANCE_IN_VALUE_RE.search(value)
    return match.group(1) if match else None


def keyed(event_id: str, target: str) -> str:
    """A per-target idempotency key derived from the envelope id, within Notice's 256 chars."""
    key = f"{event_id}:{target}"
    if len(key) <= _MAX_NOTICE_EVENT_ID:
        return key
    return f"{event_id}:{hashlib.sha256(target.encode()).hexdigest()[:32]}"


def add_seconds(moment: datetime, seconds: int, *, field: str) -> datetime:
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidEvent(
            f"{field}: {moment.isoformat()} is too late to add {seconds} s",
            errors=[{"type": "datetime_overflow", "loc": [field], "msg": "too late to add the notice period"}],
        ) from None


def invalid(
    what: str,
    error: ValidationError,
    *,
    drop_tag: str | None = None,
    prefix: tuple[str | int, ...] = (),
) -> InvalidEvent:
    """Turn a pydantic error into InvalidEvent: every field path named, no input echoed back.

    ``drop_tag`` removes a discriminated union's tag from the front of each path;
    ``prefix`` puts a nested model's paths back where they are in the whole event.
    """
    errors: list[dict[str, object]] = []
    for item in error.errors(include_url=False, include_context=False, include_input=False):
        loc = list(item["loc"])
        if drop_tag is not None and loc[:1] == [drop_tag]:
            loc = loc[1:]
        loc = [*prefix, *loc]
        errors.append({"type": item["type"], "loc": loc, "msg": item["msg"]})
    shown = "; ".join(_describe(e["loc"], e["msg"]) for e in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return InvalidEvent(f"{what} does not parse: {shown}{more}", errors=errors)


def _describe(loc: object, msg: object) -> str:
    path = ".".join(str(p) for p in loc) if isinstance(loc, list) else ""
    return f"{path}: {msg}" if path else str(msg)
