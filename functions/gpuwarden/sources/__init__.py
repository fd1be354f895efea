"""Every input gpuwarden accepts, as models of its shapes (parsed into the domain).

- EventBridge events (``detail-type`` + ``source``): one model per shape (`ec2`, `capacity`,
  `health`, `cloudwatch`), each turning into a :class:`NoticeBatch` of :class:`Notice`; the kinds'
  specs name their models and one discriminated union of them parses an event
  (`gpuwarden.kinds.inputs`)
- our Scheduler target input (``"gpuwarden": "budget-window"``) → :class:`SchedulerTick`
- the GPU-health scan's Scheduler input (``"gpuwarden": "gpu-health-scan"``) → :class:`ScanTick`
- a Lambda SNS event carrying an Alertmanager notification → :class:`AlertBatch`
- a runbook payload (``action``, no ``detail-type``) → :class:`RunbookRequest`

Anything malformed raises :class:`~gpuwarden.domain.errors.InvalidEvent` naming the offending
fields; no other exception leaves these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gpuwarden.domain.errors import InvalidEvent

from ._common import Envelope, NoticeBatch, invalid
from .rules import Rule
from .runbook import RunbookRequest
from .scan import SCAN_MARKER, ScanTick
from .sns import AlertBatch, is_sns_event, parse_sns
from .ticks import MARKER, SchedulerTick

__all__ = [
    "MARKER",
    "SCAN_MARKER",
    "AlertBatch",
    "Envelope",
    "InvalidEvent",
    "NoticeBatch",
    "Rule",
    "RunbookRequest",
    "ScanTick",
    "SchedulerTick",
    "as_mapping",
    "is_sns_event",
    "parse_runbook",
    "parse_scan_tick",
    "parse_sns",
]


def as_mapping(raw: object, what: str) -> Mapping[str, Any]:
    """``raw`` as a JSON object, or the InvalidEvent that says it is not one."""
    if not isinstance(raw, Mapping):
        raise InvalidEvent(
            f"{what} must be a JSON object, got {type(raw).__name__}",
            errors=[{"type": "dict_type", "loc": [], "msg": "Input should be a JSON object"}],
        )
    return raw


def parse_runbook(raw: object) -> RunbookRequest:
    try:
        return RunbookRequest.model_validate(as_mapping(raw, "a runbook request"))
    except ValidationError as error:
        raise invalid("runbook request", error) from None


def parse_scan_tick(raw: object) -> ScanTick:
    try:
        return ScanTick.model_validate(as_mapping(raw, "a Scheduler input"))
    except ValidationError as error:
        raise invalid("Scheduler input", error) from None
