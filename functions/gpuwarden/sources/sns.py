"""Alertmanager notifications over SNS, as Lambda receives them (docs/gpu-signals.md).

The Lambda SNS event (``Records[].Sns``) carries the notification as Alertmanager rendered it:

- AWS's JSON template for Lambda consumers (the ``sns.default.message`` override AWS documents for
  Amazon Managed Service for Prometheus): ``{"receiver", "status", "alerts": [{"status", "labels",
  "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}]}``, times in Go's
  ``2026-11-24 06:43:26.841 +0000 UTC`` form;
- Alertmanager's default ``sns.default.message`` text (its default.tmpl): ``Alerts Firing:`` /
  ``Alerts Resolved:`` sections of ``Labels:`` / ``Annotations:`` / ``Source:`` blocks, no times.

A message over SNS's 256 KB is cut by Alertmanager, which then sets the message attribute
``truncated`` (``"true"``; newer releases also ``modified``): what survived is read, the rest
reported. Anything that is neither rendering raises `InvalidEvent` naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from gpuwarden.domain.alerts import Alert
from gpuwarden.domain.errors import InvalidEvent

#: The message attributes Alertmanager sets when it cut or altered the message (notify/sns/sns.go).
TRUNCATED_ATTRIBUTES = ("truncated", "modified")
MAX_MESSAGE = 256 * 1024 + 1024


class _Loose(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class SnsAttribute(_Loose):
    type: str = Field(alias="Type")
    value: str = Field(alias="Value", max_length=4096)


class SnsMessage(_Loose):
    type: str = Field(default="Notification", alias="Type")
    message_id: str = Field(alias="MessageId", min_length=1, max_length=128)
    topic_arn: str = Field(alias="TopicArn", max_length=1024)
    subject: str | None = Field(default=None, alias="Subject", max_length=1024)
    message: str = Field(alias="Message", max_length=MAX_MESSAGE)
    timestamp: AwareDatetime = Field(alias="Timestamp")
    attributes: dict[str, SnsAttribute] = Field(default_factory=dict, alias="MessageAttributes")


class SnsRecord(_Loose):
    event_source: Literal["aws:sns"] = Field(alias="EventSource")
    sns: SnsMessage = Field(alias="Sns")


class SnsEvent(_Loose):
    #: Lambda delivers one SNS message per invocation.
    records: list[SnsRecord] = Field(alias="Records", min_length=1, max_length=1)


@dataclass(frozen=True)
class AlertBatch:
    """The alerts one SNS notification carries, and what could not be read of it."""

    message_id: str
    topic_arn: str
    published: datetime
    rendering: Literal["json", "text"]
    alerts: tuple[Alert, ...]
    #: Alertmanager cut the message (its ``truncated`` attribute): what was lost, in words.
    lost: str | None = None


def is_sns_event(event: Mapping[str, Any]) -> bool:
    records = event.get("Records")
    return isinstance(records, list) and bool(records) and isinstance(records[0], Mapping) and "Sns" in records[0]


# --------------------------------------------------------------------------- Go times

_GO_TIME = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?P<frac>\.\d+)? (?P<offset>[+-]\d{4})"
    r"(?: [A-Za-z0-9+-]+)?(?: m=[+-]\d+(?:\.\d+)?)?$"
)


def go_time(text: str) -> datetime | None:
    """Go's ``time.Time.String()`` (``2026-11-24 06:43:26.841 +0000 UTC``) or RFC 3339 → aware UTC;
    Go's zero time (a firing alert's ``endsAt``) → None. Anything else raises ValueError."""
    text = text.strip()
    if not text or text.startswith("0001-01-01"):
        return None
    match = _GO_TIME.match(text)
    if match is None:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    frac = (match["frac"] or ".0")[1:7].ljust(6, "0")
    iso = f"{match['date']}T{match['time']}.{frac}{match['offset'][:3]}:{match['offset'][3:]}"
    return datetime.fromisoformat(iso).astimezone(UTC)


# --------------------------------------------------------------------------- renderings


def _bad(loc: list[str | int], msg: str) -> InvalidEvent:
    where = ".".join(str(p) for p in loc)
    return InvalidEvent(f"SNS notification does not parse: {where}: {msg}", errors=[{"loc": loc, "msg": msg}])


def _json_alert(raw: object, loc: list[str | int]) -> Alert:
    if not isinstance(raw, Mapping):
        raise _bad(loc, "an alert must be a JSON object")
    labels = raw.get("labels") or {}
    annotations = raw.get("annotations") or {}
    if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
        raise _bad([*loc, "labels"], "labels and annotations must be JSON objects")
    name = labels.get("alertname")
    if not isinstance(name, str) or not name:
        raise _bad([*loc, "labels", "alertname"], "every alert carries its alertname label")
    status = raw.get("status")
    if status not in ("firing", "resolved"):
        raise _bad([*loc, "status"], f"expected 'firing' or 'resolved', got {str(status)[:40]!r}")
    try:
        starts = go_time(str(raw.get("startsAt") or ""))
    except ValueError:
        raise _bad([*loc, "startsAt"], f"not a Go or RFC 3339 time: {str(raw.get('startsAt'))[:60]!r}") from None
    fingerprint = raw.get("fingerprint")
    return Alert(
        name=name[:256],
        status=status,
        labels={str(k)[:256]: str(v)[:1024] for k, v in labels.items()},
        annotations={str(k)[:256]: str(v)[:1024] for k, v in annotations.items()},
        starts_at=starts,
        fingerprint=str(fingerprint)[:64] if fingerprint else None,
    )


def _surviving_alerts(message: str) -> list[object]:
    """The complete alert objects at the head of a cut JSON message."""
    start = message.find('"alerts"')
    start = message.find("[", start) if start >= 0 else -1
    if start < 0:
        return []
    decoder, at = json.JSONDecoder(), start + 1
    found: list[object] = []
    while True:
        while at < len(message) and message[at] in " \t\r\n,":
            at += 1
        try:
            item, at = decoder.raw_decode(message, at)
        except ValueError:
            return found
        found.append(item)


def _from_json(message: str, cut: bool) -> tuple[list[Alert], str | None]:
    loc: list[str | int] = ["Records", 0, "Sns", "Message"]
    try:
        document = json.loads(message)
    except ValueError:
        if not cut:
            raise _bad(loc, "starts as JSON but is not valid JSON (and carries no 'truncated' attribute)") from None
        raws = _surviving_alerts(message)
        kept = [_json_alert(a, [*loc, "alerts", i]) for i, a in enumerate(raws)]
        size = len(message.encode())
        return (
            kept,
            f"Alertmanager truncated the message at {size} bytes: {len(kept)} complete alerts read, the rest lost",
        )
    if not isinstance(document, Mapping) or not isinstance(document.get("alerts"), list):
        raise _bad([*loc, "alerts"], "the JSON template's 'alerts' list is missing")
    return [_json_alert(a, [*loc, "alerts", i]) for i, a in enumerate(document["alerts"])], None


_PAIR = re.compile(r"^ - (?P<name>[^=]+?) = (?P<value>.*)$")


def _from_text(message: str, cut: bool) -> tuple[list[Alert], str | None]:
    """Alertmanager's default text: sections of ``Labels:`` / ``Annotations:`` / ``Source:`` blocks."""
    alerts: list[Alert] = []
    status, part = "", ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    complete = True
    for line in message.splitlines():
        if line.startswith("Alerts Firing:") or line.startswith("Alerts Resolved:"):
            status = "firing" if "Firing" in line else "resolved"
        elif line == "Labels:":
            part, labels, annotations, complete = "labels", {}, {}, False
        elif line == "Annotations:":
            part = "annotations"
        elif line.startswith("Source:"):
            if labels.get("alertname") and status:
                alerts.append(Alert(labels["alertname"][:256], status, dict(labels), dict(annotations)))
            part, complete = "", True
        elif (pair := _PAIR.match(line)) and part:
            (labels if part == "labels" else annotations)[pair["name"][:256]] = pair["value"][:1024]
    if not alerts and not cut:
        loc: list[str | int] = ["Records", 0, "Sns", "Message"]
        raise _bad(loc, "neither Alertmanager's JSON template nor its default text ('Alerts Firing:' … 'Labels:')")
    lost = None
    if cut or not complete:
        lost = f"Alertmanager truncated the message: {len(alerts)} complete alerts read, the rest lost"
    return alerts, lost


def parse_sns(event: Mapping[str, Any]) -> AlertBatch:
    """A Lambda SNS event → its `AlertBatch`."""
    from pydantic import ValidationError

    from ._common import invalid

    try:
        parsed = SnsEvent.model_validate(event)
    except ValidationError as error:
        raise invalid("SNS notification", error) from None
    sns = parsed.records[0].sns
    cut = any(sns.attributes.get(k) is not None and sns.attributes[k].value for k in TRUNCATED_ATTRIBUTES)
    body = sns.message.lstrip()
    rendering: Literal["json", "text"] = "json" if body.startswith("{") else "text"
    alerts, lost = (_from_json if rendering == "json" else _from_text)(body, cut)
    return AlertBatch(sns.message_id, sns.topic_arn, sns.timestamp.astimezone(UTC), rendering, tuple(alerts), lost)
