"""The EventBridge rules gpuwarden deploys, as data: each kind's spec (gpuwarden/kinds/) names its
rules, the CDK stack builds them from there, and `gpuwarden invoke` (and every handler) applies the
same filters, so a local run takes exactly the events the deployed rules would deliver
(docs/events.md).

A pattern is EventBridge's JSON event-pattern language; `matches` implements the part of it
these rules use: lists of exact values, ``prefix``, ``wildcard``, nested objects, arrays in the
event (any element matches) and ``$or``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, get_args

from pydantic import BaseModel

#: gpuwarden's own GPU-idle alarms start with this; users may configure more prefixes.
DEFAULT_ALARM_PREFIX = "gpuwarden-gpu-idle"


@dataclass(frozen=True)
class Rule:
    """One deployed EventBridge rule: its construct id, what it is for, what it matches."""

    name: str
    description: str
    pattern: Mapping[str, Any]

    @property
    def detail_types(self) -> tuple[str, ...]:
        return tuple(self.pattern["detail-type"])


def detail_types_of(model: type[BaseModel]) -> tuple[str, ...]:
    """The detail-types a source model accepts: its ``detail_type`` Literal."""
    return tuple(get_args(model.model_fields["detail_type"].annotation))


def rule_of(name: str, description: str, model: type[BaseModel], **pattern: Any) -> Rule:
    """A rule for every detail-type of ``model``, from its source (the model's ``source`` Literal),
    narrowed by ``pattern`` (usually ``detail=...``)."""
    sources = list(get_args(model.model_fields["source"].annotation))
    return Rule(name, description, {"source": sources, "detail-type": list(detail_types_of(model)), **pattern})


def parse_prefixes(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A prefix list from configuration: JSON-ish list, comma-separated text, or a sequence."""
    if value is None:
        return (DEFAULT_ALARM_PREFIX,)
    items = re.split(r"[,\s\[\]\"']+", value) if isinstance(value, str) else [str(v) for v in value]
    return tuple(dict.fromkeys([DEFAULT_ALARM_PREFIX, *(p.strip() for p in items if p.strip())]))


# --------------------------------------------------------------------------- matching


@cache
def _wildcard(expression: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expression.split("*")), re.DOTALL)


def _leaf(condition: Any, value: Any) -> bool:
    if isinstance(condition, Mapping):
        if "prefix" in condition:
            return isinstance(value, str) and value.startswith(str(condition["prefix"]))
        if "wildcard" in condition:
            return isinstance(value, str) and bool(_wildcard(str(condition["wildcard"])).fullmatch(value))
        return False
    return type(condition) is type(value) and condition == value


def matches(pattern: Any, value: Any) -> bool:
    """Whether ``value`` (an event, or a part of one) matches an EventBridge ``pattern``."""
    if isinstance(value, list):
        return any(matches(pattern, item) for item in value)
    if isinstance(pattern, list):
        return any(_leaf(condition, value) for condition in pattern)
    if not isinstance(pattern, Mapping) or not isinstance(value, Mapping):
        return False
    for key, sub in pattern.items():
        if key == "$or":
            if not any(matches(alternative, value) for alternative in sub):
                return False
        elif key not in value or not matches(sub, value[key]):
            return False
    return True


def rule_for(event: Mapping[str, Any], deployed: Sequence[Rule]) -> Rule | None:
    """The deployed rule that takes this event (None: EventBridge would deliver it nowhere)."""
    return next((rule for rule in deployed if matches(rule.pattern, event)), None)
