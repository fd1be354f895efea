"""gpuwarden's Grafana dashboard (docs/deploy.md, "Grafana"): the metrics gpuwarden writes to
CloudWatch, read through Grafana's CloudWatch data source, for teams whose dashboards live in Grafana.

The panels follow the CloudWatch dashboard the stack creates (infra/components/dashboard.py): the
same namespace, the same ``service`` dimension, names from ``gpuwarden.observability.Metric``. Made
with grafanalib; ``python -m infra.grafana`` writes ``docs/grafana/gpuwarden.json`` (the file a team
imports), and tests/infra/test_grafana.py checks that file against this code and every metric it
reads against the ones the code emits.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafanalib.cloudwatch import CloudwatchMetricsTarget
from grafanalib.core import Dashboard, GridPos, Template, Templating, TimeSeries
from grafanalib.core import Time as GrafanaTime

from gpuwarden.domain.actions import Metric
from infra.components.dashboard import NAMESPACE, SERVICE

OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "gpuwarden.json"
UID = "gpuwarden"
#: the dashboard's variables: the CloudWatch data source, its region, the Powertools service name
DATASOURCE = "${datasource}"
PERIOD = "300"  # 5 minutes, as the CloudWatch dashboard
WIDTH, HEIGHT, COLUMNS = 8, 8, 3


@dataclass(frozen=True)
class Series:
    metric: Metric
    statistic: str = "Sum"
    alias: str = ""
    #: extra dimensions, "*" for every value (Events by kind and outcome)
    by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Panel:
    title: str
    series: tuple[Series, ...]
    description: str = ""


PANELS: tuple[Panel, ...] = (
    Panel(
        "Events by kind and outcome",
        (Series(Metric.EVENTS, by=("kind", "outcome"), alias="{{kind}} {{outcome}}"),),
        "Every event gpuwarden answered, by kind and outcome (handled, dry-run, ignored, failed, ...).",
    ),
    Panel(
        "Seconds left at drain end (deadline kinds)",
        (
            Series(Metric.SECONDS_LEFT_AT_DRAIN_END, "Minimum", "min seconds left"),
            Series(Metric.SECONDS_LEFT_AT_DRAIN_END, "Average", "avg seconds left"),
            Series(Metric.DRAINS_PAST_DEADLINE, alias="drains past deadline"),
        ),
        "How much of a Spot notice or deadline was left when a drain ended; any drain past its deadline.",
    ),
    Panel(
        "Checkpoints: requested, acknowledged, timed out",
        (
            Series(Metric.CHECKPOINT_REQUESTS, alias="requested"),
            Series(Metric.CHECKPOINT_ACKS, alias="acknowledged"),
            Series(Metric.CHECKPOINT_TIMEOUTS, alias="timed out"),
        ),
    ),
    Panel(
        "Evictions (blocked by PodDisruptionBudgets)",
        (
            Series(Metric.PODS_EVICTED, alias="evicted"),
            Series(Metric.EVICTIONS_BLOCKED, alias="blocked by a PDB"),
            Series(Metric.PODS_DELETED, alias="deleted"),
        ),
    ),
    Panel(
        "Nodes: cordoned, replacements, lost undrained; NodePool writes refused",
        (
            Series(Metric.NODES_CORDONED, alias="cordoned"),
            Series(Metric.REPLACEMENTS, alias="replacements launched"),
            Series(Metric.NODES_LOST_UNDRAINED, alias="lost undrained"),
            Series(Metric.NODEPOOL_WRITES_FAILED, alias="NodePool writes refused"),
        ),
    ),
    Panel("Drain seconds (p90)", (Series(Metric.DRAIN_SECONDS, "p90", "drain seconds p90"),)),
    Panel(
        "GPU health: scans and unhealthy nodes",
        (
            Series(Metric.GPU_HEALTH_SCANS, alias="scans"),
            Series(Metric.GPU_HEALTH_UNHEALTHY, "Maximum", "unhealthy nodes (max per scan)"),
        ),
        "docs/gpu-signals.md: the every-minute GPU-health scan.",
    ),
    Panel(
        "GPU health breaker: nodes held back",
        (Series(Metric.GPU_HEALTH_HELD_BACK, alias="held back (pool at max_unhealthy_percent)"),),
    ),
    Panel(
        "Idle GPU-hours held by their owners",
        (Series(Metric.IDLE_GPU_HOURS_HELD, alias="GPU-hours held"),),
        "GPU-hours kept idle on nodes gpu-idle could not reclaim: their pods would come back (docs/gpu-idle.md).",
    ),
)


def _target(series: Series, ref: str) -> CloudwatchMetricsTarget:
    dimensions = {"service": "${service}", **dict.fromkeys(series.by, "*")}
    return CloudwatchMetricsTarget(
        namespace=NAMESPACE,
        metricName=series.metric.value,
        statistic=series.statistic,
        statistics=[series.statistic],
        dimensions=dimensions,
        matchExact=not series.by,  # a wildcard dimension matches every kind and outcome
        period=PERIOD,
        region="${region}",
        alias=series.alias,
        refId=ref,
        datasource=DATASOURCE,
    )


def _panel(panel: Panel, index: int) -> TimeSeries:
    targets = [_target(s, chr(ord("A") + i)) for i, s in enumerate(panel.series)]
    x, y = (index % COLUMNS) * WIDTH, (index // COLUMNS) * HEIGHT
    return TimeSeries(
        title=panel.title,
        description=panel.description or None,
        dataSource=DATASOURCE,
        targets=targets,
        gridPos=GridPos(h=HEIGHT, w=WIDTH, x=x, y=y),
        id=index + 1,
    )


def dashboard() -> Dashboard:
    variables = [
        Template(name="datasource", label="CloudWatch", query="cloudwatch", type="datasource"),
        Template(name="region", label="Region", query="regions()", dataSource=DATASOURCE, default="default"),
        Template(
            name="service", label="service (POWERTOOLS_SERVICE_NAME)", query=SERVICE, default=SERVICE, type="textbox"
        ),
    ]
    return Dashboard(
        title="gpuwarden",
        uid=UID,
        description="gpuwarden's CloudWatch metrics (namespace Gpuwarden), beside the stack's CloudWatch dashboard",
        tags=["gpuwarden", "karpenter", "gpu"],
        refresh="1m",
        schemaVersion=39,
        time=GrafanaTime("now-24h", "now"),
        templating=Templating(list=variables),
        panels=[_panel(panel, i) for i, panel in enumerate(PANELS)],
    ).auto_panel_ids()


def dashboard_json() -> dict[str, Any]:
    """The dashboard as Grafana imports it (grafanalib's own encoder, then plain JSON)."""
    from grafanalib._gen import DashboardEncoder

    loaded: dict[str, Any] = json.loads(json.dumps(dashboard().to_json_data(), cls=DashboardEncoder))
    return loaded


def render() -> str:
    return json.dumps(dashboard_json(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUTPUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
