"""aws.cloudwatch alarm events → gpu-idle notices.

Shapes: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html.
- "CloudWatch Alarm State Change": the node is named by the ``InstanceId`` / ``NodeName``
  dimensions of the alarm's metrics (Container Insights ``node_gpu_utilization`` has both).
- "CloudWatch Alarm Contributor State Change" (Metrics Insights multi-time-series alarms):
  the node is named by the contributor's attributes (the query's GROUP BY keys).

Every state is kept (ALARM, OK, INSUFFICIENT_DATA): the service decides what OK means.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, ValidationError

from gpuwarden.domain.gpu_idle import GPU_METRICS
from gpuwarden.domain.notice import Kind, Notice

from ._common import (
    Envelope,
    FrozenModel,
    InstanceId,
    Name,
    NodeName,
    NoticeBatch,
    Text,
    detail_of,
    invalid,
    keyed,
    shown,
)
from .rules import Rule

# The EventBridge reference also lists the alarm events under "aws.monitoring" (CloudWatch's
# IAM prefix); the CloudWatch user guide's samples all say "aws.cloudwatch". Accept both.
CloudWatchSource = Literal["aws.cloudwatch", "aws.monitoring"]
AlarmStateValue = Literal["OK", "ALARM", "INSUFFICIENT_DATA"]

_Dimensions = Annotated[dict[Name, Text], Field(max_length=30)]


class AlarmState(FrozenModel):
    value: AlarmStateValue
    reason: Text = ""
    reason_data: Annotated[str, Field(max_length=16_384)] | None = Field(None, alias="reasonData")
    timestamp: Name | None = None

    @property
    def threshold(self) -> float | None:
        """The threshold from ``reasonData`` (a JSON string), when it has one."""
        if not self.reason_data:
            return None
        try:
            data = json.loads(self.reason_data)
        except (ValueError, RecursionError):
            return None
        value = data.get("threshold") if isinstance(data, dict) else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Metric(FrozenModel):
    namespace: Name | None = None
    name: Name | None = None
    dimensions: _Dimensions = Field(default_factory=dict)


class MetricStat(FrozenModel):
    metric: Metric


class AlarmMetric(FrozenModel):
    id: Name
    metric_stat: MetricStat | None = Field(None, alias="metricStat")
    expression: Annotated[str, Field(max_length=8192)] | None = None


class AlarmConfiguration(FrozenModel):
    metrics: list[AlarmMetric] = Field(default_factory=list, max_length=100)


class _Target(FrozenModel):
    """Which node an alarm speaks of, from dimensions or contributor attributes."""

    instance_id: InstanceId | None = Field(None, alias="InstanceId")
    node_name: NodeName | None = Field(None, alias="NodeName")
    #: Container Insights' ``ClusterName`` dimension (or a contributor's GROUP BY key)
    cluster: Name | None = Field(None, alias="ClusterName")

    @property
    def key(self) -> str | None:
        return self.instance_id or self.node_name


def _target(values: dict[str, str], *, at: tuple[str | int, ...]) -> _Target:
    try:
        return _Target.model_validate(values)
    except ValidationError as error:
        raise invalid("CloudWatch alarm event", error, prefix=at) from None


class AlarmStateChangeDetail(FrozenModel):
    alarm_name: Name = Field(alias="alarmName")
    state: AlarmState
    previous_state: AlarmState | None = Field(None, alias="previousState")
    configuration: AlarmConfiguration = Field(default_factory=AlarmConfiguration)


class _AlarmEvent(Envelope):
    def _gpu_idle(self, target: _Target, state: AlarmState, extra: dict[str, Any]) -> Notice:
        detail: dict[str, Any] = {"state": state.value, "reason": state.reason, **extra}
        if state.threshold is not None:
            detail["threshold"] = state.threshold
        return self.notice(
            Kind.GPU_IDLE,
            event_id=keyed(self.id, target.key or "?"),
            instance_id=target.instance_id,
            node_name=target.node_name,
            cluster=target.cluster,
            detail=detail,
        )


class AlarmStateChange(_AlarmEvent):
    source: CloudWatchSource
    detail_type: Literal["CloudWatch Alarm State Change"] = Field(alias="detail-type")
    detail: AlarmStateChangeDetail

    def targets(self) -> tuple[_Target, ...]:
        """One target per distinct node among the metrics' dimensions (metric math may have several)."""
        return tuple(self._watched().keys())

    def _watched(self) -> dict[_Target, Metric | None]:
        """Each target, with the GPU series the alarm watches for it (None: no GPU metric names it)."""
        found: dict[_Target, Metric | None] = {}
        for i, alarm_metric in enumerate(self.detail.configuration.metrics):
            if alarm_metric.metric_stat is None:
                continue
            metric = alarm_metric.metric_stat.metric
            at = ("detail", "configuration", "metrics", i, "metricStat", "metric", "dimensions")
            target = _target(metric.dimensions, at=at)
            if target.key is None:
                continue
            if found.get(target) is None:
                found[target] = metric if metric.name in GPU_METRICS and metric.namespace else None
        return found

    def to_batch(self) -> NoticeBatch:
        d = self.detail
        targets = self.targets()
        if not targets:
            return NoticeBatch(
                notices=(),
                ignored=f"alarm {d.alarm_name} has no InstanceId or NodeName dimension",
                event_id=self.id,
                kind=Kind.GPU_IDLE,
            )
        extra = {
            "alarm_name": d.alarm_name,
            "previous_state": d.previous_state.value if d.previous_state else None,
        }
        notices = tuple(
            self._gpu_idle(t, d.state, extra | _watched_detail(metric)) for t, metric in self._watched().items()
        )
        return NoticeBatch(notices=notices, kind=Kind.GPU_IDLE)


def _watched_detail(metric: Metric | None) -> dict[str, Any]:
    """The alarm's own GPU series, for the re-check at action time to read (none: the default series)."""
    if metric is None:
        return {}
    return {"metric": {"namespace": metric.namespace, "name": metric.name, "dimensions": dict(metric.dimensions)}}


class AlarmContributor(FrozenModel):
    id: Name
    attributes: _Dimensions = Field(default_factory=dict)


class ContributorStateChangeDetail(FrozenModel):
    alarm_name: Name = Field(alias="alarmName")
    alarm_contributor: AlarmContributor = Field(alias="alarmContributor")
    state: AlarmState
    configuration: AlarmConfiguration = Field(default_factory=AlarmConfiguration)

    def watched_query(self) -> dict[str, Any]:
        """The alarm's Metrics Insights query over a GPU metric, for the re-check to read narrowed
        to this contributor (none: the default series)."""
        for metric in self.configuration.metrics:
            if metric.expression and any(m in metric.expression for m in GPU_METRICS):
                return {"metric": {"query": metric.expression, "dimensions": dict(self.alarm_contributor.attributes)}}
        return {}


class AlarmContributorStateChange(_AlarmEvent):
    source: CloudWatchSource
    detail_type: Literal["CloudWatch Alarm Contributor State Change"] = Field(alias="detail-type")
    detail: ContributorStateChangeDetail

    def to_batch(self) -> NoticeBatch:
        d = self.detail
        contributor = d.alarm_contributor
        target = _target(contributor.attributes, at=("detail", "alarmContributor", "attributes"))
        if target.key is None:
            return NoticeBatch(
                notices=(),
                ignored=(f"alarm {d.alarm_name} contributor {contributor.id} has no InstanceId or NodeName attribute"),
                event_id=self.id,
                kind=Kind.GPU_IDLE,
            )
        extra = {"alarm_name": d.alarm_name, "contributor_id": contributor.id, **d.watched_query()}
        return NoticeBatch(notices=(self._gpu_idle(target, d.state, extra),), kind=Kind.GPU_IDLE)


# --------------------------------------------------------------------------- why a rule did not take it


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


def prefixes_of(deployed: Sequence[Rule]) -> list[str]:
    """The GPU-idle alarm name prefixes the deployed alarm rules take."""
    for rule in deployed:
        for alternative in (rule.pattern.get("detail") or {}).get("$or", ()):
            if "alarmName" in alternative:
                return [str(c["prefix"]) for c in alternative["alarmName"]]
    return []


def why_not_gpu_idle(event: Mapping[str, Any], deployed: Sequence[Rule]) -> str | None:
    """Why the deployed GPU-idle rules do not take this alarm event."""
    if event.get("source") not in get_args(CloudWatchSource):
        return None
    prefixes = prefixes_of(deployed)
    detail = detail_of(event)
    name = shown(detail.get("alarmName"))
    state = detail.get("state")
    value = state.get("value") if isinstance(state, Mapping) else None
    if value != "ALARM":
        return f"alarm {name} is in state {shown(value)}: only ALARM means idle"
    watched = ", ".join(_alarm_metrics(detail)) or "no metric"
    return (
        f"alarm {name} is not a GPU-idle alarm: it watches {watched}, not {' or '.join(GPU_METRICS)}, "
        f"and its name starts with none of the configured GPU-idle prefixes ({', '.join(prefixes)})"
    )
