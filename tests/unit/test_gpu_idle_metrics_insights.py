"""A Metrics Insights alarm over DCGM's GPU utilisation is re-checked on its own query, narrowed to
the contributor (docs/events.md, gpu-idle); one over Container Insights' node_gpu_utilization keeps
Container Insights' per-node series. Sample: events/cloudwatch-alarm-contributor-dcgm-metrics-insights.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.gpu_idle import IdleMetric, narrow_query
from gpuwarden.domain.notice import Notice
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.sources import NoticeBatch

EVENTS = Path(__file__).resolve().parents[2] / "events"
INSTANCE, NODE = "i-0abc1234def567890", "ip-10-0-1-23.us-west-2.compute.internal"


def notice(sample: str) -> Notice:
    batch = parse_notices(json.loads((EVENTS / sample).read_text()))
    assert isinstance(batch, NoticeBatch)
    [one] = batch.notices
    return one


def test_a_dcgm_metrics_insights_contributor_is_rechecked_on_its_own_query_for_that_node() -> None:
    # Given the DCGM Metrics Insights contributor event
    found = notice("cloudwatch-alarm-contributor-dcgm-metrics-insights.json")

    # When the re-check's series is chosen
    metric = IdleMetric.for_alarm(found.detail.get("metric"), "ml-prod", INSTANCE, NODE)

    # Then it is the alarm's own query, narrowed to the contributor, its grouping kept
    assert metric.name == "DCGM_FI_DEV_GPU_UTIL"
    assert metric.query == (
        "SELECT AVG(DCGM_FI_DEV_GPU_UTIL) "
        'FROM SCHEMA("ContainerInsights/Prometheus", ClusterName, InstanceId, NodeName) '
        f"WHERE ClusterName = 'ml-prod' AND InstanceId = '{INSTANCE}' AND NodeName = '{NODE}' "
        "GROUP BY InstanceId, NodeName ORDER BY AVG() ASC"
    )


def test_a_node_gpu_utilization_query_keeps_container_insights_per_node_series() -> None:
    found = notice("cloudwatch-alarm-contributor-state-change.json")
    metric = IdleMetric.for_alarm(found.detail.get("metric"), "ml-prod", "i-1", "node-1")
    assert metric == IdleMetric.container_insights("ml-prod", "i-1", "node-1")


def test_a_query_without_where_gets_one_and_odd_values_are_refused() -> None:
    assert narrow_query("SELECT AVG(DCGM_FI_DEV_GPU_UTIL) FROM x LIMIT 10", [("NodeName", "n-1")]) == (
        "SELECT AVG(DCGM_FI_DEV_GPU_UTIL) FROM x WHERE NodeName = 'n-1' LIMIT 10"
    )
    with pytest.raises(ValueError, match="cannot be put into a query"):
        narrow_query("SELECT AVG(DCGM_FI_DEV_GPU_UTIL) FROM x", [("NodeName", "n' OR 1=1 --")])


def test_the_adapter_sends_the_query_to_get_metric_data(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    from gpuwarden.adapters.aws import Cloud

    for key, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(key, value)
    metric = IdleMetric.for_alarm(
        notice("cloudwatch-alarm-contributor-dcgm-metrics-insights.json").detail.get("metric"),
        "ml-prod",
        INSTANCE,
        NODE,
    )
    sent: list[dict[str, Any]] = []
    with mock_aws():
        cloud = Cloud("us-west-2")
        cloud.cloudwatch.meta.events.register(
            "provide-client-params.cloudwatch.GetMetricData", lambda params, **_: sent.append(params)
        )
        values = cloud.gpu_utilization(metric, 60, 300)
    assert values == []  # moto keeps no Metrics Insights data: "no data" is the re-check's refusal
    [query] = sent[0]["MetricDataQueries"]
    assert query["Expression"] == metric.query
    assert query["Period"] == 300
    assert "MetricStat" not in query
