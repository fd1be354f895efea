"""The EventBridge rules gpuwarden deploys, defined once: the CDK stack builds its rules from
these patterns and `gpuwarden invoke` (and every handler) applies the same filters, so a local
run takes exactly the events the deployed rules would deliver (docs/events.md).

A pattern is EventBridge's JSON event-pattern language; `matches` implements the part of it
these rules use: lists of exact values, ``prefix``, ``wildcard``, nested objects, arrays in the
event (any element matches) and ``$or``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from gpuwarden.domain.gpu_idle import GPU_METRICS
from gpuwarden.domain.notice import Kind

Route = Literal["interruption", "maintenance", "gpu_idle", "windows", "runbook"]
"""The handler module (deployed function) an input goes to. ``gpu_idle`` is the GPU function: its
CloudWatch alarms, the Alertmanager topic's notifications and the GPU-health scan."""

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
#: AWS's pages spell the interruptible Capacity Reservation warning two ways.
RESERVATION_WARNINGS = (
    "EC2 Capacity Reservation Instance Interruption Warning",
    "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
)
#: ... and the Capacity Block events two ways each ("Capacity Block …", "Capacity Block Reservation …").
BLOCK_WARNINGS = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")
BLOCK_DELIVERIES = ("Capacity Block Delivered", "Capacity Block Reservation Delivered")
HEALTH = "AWS Health Event"
ALARM_STATE_CHANGE = "CloudWatch Alarm State Change"
CONTRIBUTOR_STATE_CHANGE = "CloudWatch Alarm Contributor State Change"

#: EC2 states after which the instance is gone or going (`instance-stopping`).
STOPPING_STATES = ("stopping", "stopped", "shutting-down", "terminated")
#: gpuwarden's own GPU-idle alarms start with this; users may configure more prefixes.
DEFAULT_ALARM_PREFIX = "gpuwarden-gpu-idle"
#: The CloudWatch user guide's samples say aws.cloudwatch; the EventBridge reference also lists aws.monitoring.
CLOUDWATCH_SOURCES = ("aws.cloudwatch", "aws.monitoring")

#: The contract kind of every detail-type gpuwarden takes (an ignored event still reports one).
KIND_OF: dict[str, Kind] = {
    SPOT_WARNING: Kind.SPOT_INTERRUPTION,
    REBALANCE: Kind.REBALANCE,
    STATE_CHANGE: Kind.INSTANCE_STOPPING,
    **dict.fromkeys(RESERVATION_WARNINGS, Kind.CAPACITY_RESERVATION_INTERRUPTION),
    **dict.fromkeys(BLOCK_WARNINGS, Kind.CAPACITY_BLOCK_EXPIRY),
    **dict.fromkeys(BLOCK_DELIVERIES, Kind.CAPACITY_BLOCK_PLAN),
    HEALTH: Kind.SCHEDULED_MAINTENANCE,
    ALARM_STATE_CHANGE: Kind.GPU_IDLE,
    CONTRIBUTOR_STATE_CHANGE: Kind.GPU_IDLE,
}


@dataclass(frozen=True)
class Rule:
    """One deployed EventBridge rule: its construct id, what it is for, where it sends events."""

    name: str
    description: str
    route: Route
    pattern: Mapping[str, Any]

    @property
    def detail_types(self) -> tuple[str, ...]:
        return tuple(self.pattern["detail-type"])


def _gpu_idle_detail(prefixes: Sequence[str]) -> dict[str, Any]:
    """ALARM, and (a GPU metric, a Metrics Insights query over one, or a configured name prefix)."""
    return {
        "state": {"value": ["ALARM"]},
        "$or": [
            {"alarmName": [{"prefix": p} for p in prefixes]},
            {"configuration": {"metrics": {"metricStat": {"metric": {"name": list(GPU_METRICS)}}}}},
            {"configuration": {"metrics": {"expression": [{"wildcard": f"*{m}*"} for m in GPU_METRICS]}}},
        ],
    }


def _ec2(detail_types: Sequence[str], **detail: Any) -> dict[str, Any]:
    pattern: dict[str, Any] = {"source": ["aws.ec2"], "detail-type": list(detail_types)}
    if detail:
        pattern["detail"] = detail
    return pattern


def rules(alarm_prefixes: Sequence[str] = (DEFAULT_ALARM_PREFIX,)) -> tuple[Rule, ...]:
    """Every rule the stack deploys, with the GPU-idle alarm name prefixes it is configured with."""
    prefixes = list(dict.fromkeys([DEFAULT_ALARM_PREFIX, *alarm_prefixes]))
    alarms = {"source": list(CLOUDWATCH_SOURCES), "detail": _gpu_idle_detail(prefixes)}
    return (
        Rule("SpotInterruption", "EC2 Spot two-minute interruption warnings", "interruption", _ec2([SPOT_WARNING])),
        Rule("Rebalance", "EC2 instance rebalance recommendations", "interruption", _ec2([REBALANCE])),
        Rule(
            "InstanceStopping",
            "EC2 instances stopping or terminating",
            "interruption",
            _ec2([STATE_CHANGE], state=list(STOPPING_STATES)),
        ),
        Rule(
            "CapacityReservationInterruption",
            "interruptible Capacity Reservations reclaiming an instance",
            "interruption",
            _ec2(RESERVATION_WARNINGS),
        ),
        Rule(
            "CapacityBlockExpiry",
            "Capacity Blocks for ML about to end (instances terminate in 10 minutes)",
            "interruption",
            _ec2(BLOCK_WARNINGS),
        ),
        Rule(
            "CapacityBlockDelivered",
            "Capacity Blocks for ML delivered: plan the drain before the block ends",
            "maintenance",
            _ec2(BLOCK_DELIVERIES),
        ),
        Rule(
            "ScheduledMaintenance",
            "AWS Health scheduled changes to EC2 instances (retirement, maintenance)",
            "maintenance",
            {
                "source": ["aws.health"],
                "detail-type": [HEALTH],
                "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
            },
        ),
        Rule(
            "GpuIdleAlarm",
            "GPU-idle per-node alarms in ALARM",
            "gpu_idle",
            {**alarms, "detail-type": [ALARM_STATE_CHANGE]},
        ),
        Rule(
            "GpuIdleContributor",
            "GPU-idle fleet alarm: a node's contributor in ALARM",
            "gpu_idle",
            {**alarms, "detail-type": [CONTRIBUTOR_STATE_CHANGE]},
        ),
    )


def prefixes_of(deployed: Sequence[Rule]) -> list[str]:
    """The GPU-idle alarm name prefixes the deployed alarm rules take."""
    for rule in deployed:
        if rule.route == "gpu_idle":
            return [str(c["prefix"]) for c in rule.pattern["detail"]["$or"][0]["alarmName"]]
    return []


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


def route_of_detail_type(detail_type: str, deployed: Sequence[Rule]) -> Route:
    """The function the rules for this detail-type target (for an event no rule takes)."""
    return next((r.route for r in deployed if detail_type in r.detail_types), "interruption")


# --------------------------------------------------------------------------- why no rule took it


def _text(value: Any, limit: int = 100) -> str:
    return repr(value)[:limit]


def _alarm_metrics(detail: Mapping[str, Any]) -> list[str]:
    configuration = detail.get("configuration")
    metrics = configuration.get("metrics") if isinstance(configuration, Mapping) else None
    found: list[str] = []
    for metric in metrics if isinstance(metrics, list) else []:
        if not isinstance(metric, Mapping):
            continue
        stat = metric.get("metricStat")
        inner = stat.get("metric") if isinstance(stat, Mapping) else None
        if isinstance(inner, Mapping) and inner.get("name"):
            found.append(str(inner["name"])[:100])
        elif metric.get("expression"):
            found.append(str(metric["expression"])[:100])
    return found


def _why_not_alarm(detail: Mapping[str, Any], prefixes: Sequence[str]) -> str:
    name = _text(detail.get("alarmName"))
    state = detail.get("state")
    value = state.get("value") if isinstance(state, Mapping) else None
    if value != "ALARM":
        return f"alarm {name} is in state {_text(value)}: only ALARM means idle"
    watched = ", ".join(_alarm_metrics(detail)) or "no metric"
    return (
        f"alarm {name} is not a GPU-idle alarm: it watches {watched}, not {' or '.join(GPU_METRICS)}, "
        f"and its name starts with none of the configured GPU-idle prefixes ({', '.join(prefixes)})"
    )


def why_no_rule(event: Mapping[str, Any], kind: Kind, prefixes: Sequence[str]) -> str:
    """The reason an event of a known detail-type is ignored: no deployed rule takes it."""
    detail = event.get("detail")
    detail = detail if isinstance(detail, Mapping) else {}
    tag = event.get("detail-type")
    if kind is Kind.GPU_IDLE and event.get("source") in CLOUDWATCH_SOURCES:
        return _why_not_alarm(detail, prefixes)
    if kind is Kind.INSTANCE_STOPPING and event.get("source") == "aws.ec2":
        return (
            f"instance {_text(detail.get('instance-id'))} entered state {_text(detail.get('state'))}: "
            "not a loss of the instance"
        )
    if kind is Kind.SCHEDULED_MAINTENANCE and event.get("source") == "aws.health":
        return (
            f"AWS Health event {_text(detail.get('eventTypeCode'))} (service {_text(detail.get('service'))}, "
            f"category {_text(detail.get('eventTypeCategory'))}) is not an EC2 scheduled change"
        )
    return f"no deployed rule takes a {tag!r} event from source {_text(event.get('source'))}"
