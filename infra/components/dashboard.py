"""The CloudWatch dashboard and the drain-deadline alarm.

gpuwarden's own metrics are in namespace ``Gpuwarden`` with Powertools' default dimension
``service`` (POWERTOOLS_SERVICE_NAME); names come from ``gpuwarden.observability.Metric``.
Per-function and per-queue widgets use SEARCH with the stack name as a partial-match term
(CloudFormation names every function and queue ``<stack>-...``), so a function or queue added
later shows up by itself.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from gpuwarden.observability import Metric
from infra.components.alarms import AlarmSink
from infra.components.naming import name_prefix

NAMESPACE = "Gpuwarden"
SERVICE = "gpuwarden"
PERIOD = Duration.minutes(5)
WIDTH = 8
HEIGHT = 6


def gpuwarden_metric(
    metric: Metric, statistic: str = cloudwatch.Stats.SUM, label: str | None = None
) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=metric.value,
        dimensions_map={"service": SERVICE},
        statistic=statistic,
        period=PERIOD,
        label=label,  # None: the metric's name (and an alarm on it stays a plain single-metric alarm)
    )


EVENTS_BY_OUTCOME = f'{{{NAMESPACE},kind,outcome,service}} MetricName="{Metric.EVENTS.value}"'


def _search(expression: str, label: str, statistic: str, period: Duration = PERIOD) -> cloudwatch.MathExpression:
    seconds = int(period.to_seconds())
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{expression}', '{statistic}', {seconds})",
        label=label or None,  # None: each series found keeps its own name
        period=period,
        using_metrics={},
    )


def _graph(
    title: str, left: list[cloudwatch.IMetric], right: list[cloudwatch.IMetric] | None = None
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=left, right=right or [], width=WIDTH, height=HEIGHT)


class Dashboard(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, alarms: AlarmSink) -> None:
        super().__init__(scope, construct_id)
        stack = name_prefix(self)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{stack}-gpuwarden")
        self.dashboard.add_widgets(
            _graph(
                "Events by kind and outcome",
                [_search(f'{{{NAMESPACE},kind,outcome,service}} MetricName="{Metric.EVENTS.value}"', "", "Sum")],
            ),
            # observe mode (docs/rollback.md#observe-first): what it would have done, beside what it did
            _graph(
                "Did (handled) / would have (observe, dry run), by kind",
                [_search(f'{EVENTS_BY_OUTCOME} outcome="handled"', "", "Sum")],
                [_search(f'{EVENTS_BY_OUTCOME} outcome="dry-run"', "", "Sum")],
            ),
            _graph(
                "Seconds left at drain end (deadline kinds)",
                [
                    gpuwarden_metric(Metric.SECONDS_LEFT_AT_DRAIN_END, cloudwatch.Stats.MINIMUM, "min seconds left"),
                    gpuwarden_metric(Metric.SECONDS_LEFT_AT_DRAIN_END, cloudwatch.Stats.AVERAGE, "avg seconds left"),
                ],
                [gpuwarden_metric(Metric.DRAINS_PAST_DEADLINE, label="drains past deadline")],
            ),
            _graph(
                "Checkpoints: requested, acknowledged, timed out",
                [
                    gpuwarden_metric(Metric.CHECKPOINT_REQUESTS),
                    gpuwarden_metric(Metric.CHECKPOINT_ACKS),
                    gpuwarden_metric(Metric.CHECKPOINT_TIMEOUTS),
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Evictions (blocked by PodDisruptionBudgets)",
                [
                    gpuwarden_metric(Metric.PODS_EVICTED),
                    gpuwarden_metric(Metric.EVICTIONS_BLOCKED),
                    gpuwarden_metric(Metric.PODS_DELETED),
                ],
            ),
            _graph(
                "Nodes: cordoned, replacements, lost undrained; NodePool writes refused",
                [
                    gpuwarden_metric(Metric.NODES_CORDONED),
                    gpuwarden_metric(Metric.REPLACEMENTS),
                    gpuwarden_metric(Metric.NODES_LOST_UNDRAINED),
                    gpuwarden_metric(Metric.NODEPOOL_WRITES_FAILED),
                ],
                [gpuwarden_metric(Metric.DRAIN_SECONDS, "p90", "drain seconds p90")],
            ),
            _graph(
                "Dead-letter queues (messages visible)",
                [
                    _search(
                        f'{{AWS/SQS,QueueName}} MetricName="ApproximateNumberOfMessagesVisible" {stack}',
                        "",
                        "Maximum",
                        Duration.minutes(1),
                    )
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "GPU health: scans and unhealthy nodes (docs/gpu-signals.md)",
                [gpuwarden_metric(Metric.GPU_HEALTH_SCANS, label="scans")],
                [
                    gpuwarden_metric(
                        Metric.GPU_HEALTH_UNHEALTHY, cloudwatch.Stats.MAXIMUM, "unhealthy nodes (max per scan)"
                    )
                ],
            ),
            _graph(
                "GPU health breaker: nodes held back",
                [gpuwarden_metric(Metric.GPU_HEALTH_HELD_BACK, label="held back (pool at max_unhealthy_percent)")],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "Function errors",
                [_search(f'{{AWS/Lambda,FunctionName}} MetricName="Errors" {stack}', "", "Sum")],
            ),
            _graph(
                "Function throttles",
                [_search(f'{{AWS/Lambda,FunctionName}} MetricName="Throttles" {stack}', "", "Sum")],
            ),
            _graph(
                "Function duration (p99, ms)",
                [_search(f'{{AWS/Lambda,FunctionName}} MetricName="Duration" {stack}', "", "p99")],
            ),
        )
        self.drains_past_deadline = cloudwatch.Alarm(
            self,
            "DrainsPastDeadline",
            alarm_description=(
                "gpuwarden: a drain ended after its deadline (pods were still on the node when the instance "
                "was due to go). Check SecondsLeftAtDrainEnd, PDBs and checkpoint timeouts."
            ),
            metric=gpuwarden_metric(Metric.DRAINS_PAST_DEADLINE),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarms.notify(self.drains_past_deadline)
