"""Whose cluster (docs/events.md, "Whose cluster"): an alarm or alert that names another cluster
is ignored, naming that cluster, before any node is looked up, whatever node name it carries (two
clusters in one account may share an address range). Events: the samples in events/, with their
``ClusterName`` / ``cluster`` edited where the test says so."""

from __future__ import annotations

import json
from typing import Any

from gpuwarden.kinds.inputs import parse_event
from gpuwarden.services.dispatch import handle_alerts
from gpuwarden.sources import AlertBatch
from tests.alert_policy import ALERTS_POLICY
from tests.integration.conftest import World, load_event
from tests.integration.gpu_idle_cluster import IDLE, assert_untouched, idle_cluster, put_utilization, run
from tests.integration.inputs import with_message
from tests.integration.scenarios import INSTANCE, NODE


def test_an_alarm_naming_another_cluster_is_ignored_before_any_node_is_looked_up(world: World) -> None:
    # Given the idle node of ml-prod, whose name an ml-staging node shares (same address range)
    idle_cluster(world.sim, trainer=False)
    put_utilization(INSTANCE, NODE, IDLE)
    event = load_event("cloudwatch-alarm-state-change-gpu-idle.json")
    event["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"]["ClusterName"] = "ml-staging"
    before = len(world.sim.requests)

    # When ml-staging's GPU-idle alarm reaches the ml-prod stack
    result = run(world, event)

    # Then it is ignored, naming the other cluster, and the cluster was not even read
    assert result["outcome"] == "ignored"
    assert result["kind"] == "gpu-idle"
    assert "ml-staging" in result["reason"], result["reason"]
    assert "would reclaim" not in result["reason"]
    assert result["node"] is None
    assert world.sim.requests[before:] == []
    assert_untouched(world, NODE)


def test_the_same_alarm_naming_this_cluster_reclaims_the_node(world: World) -> None:
    idle_cluster(world.sim, trainer=False)
    put_utilization(INSTANCE, NODE, IDLE)
    result = run(world, load_event("cloudwatch-alarm-state-change-gpu-idle.json"))  # ClusterName ml-prod
    assert result["outcome"] == "handled", result["reason"]


def test_a_contributor_naming_another_cluster_is_ignored(world: World) -> None:
    # Given a Metrics Insights alarm grouped by ClusterName and NodeName, its contributor in ml-staging
    idle_cluster(world.sim, trainer=False)
    event = load_event("cloudwatch-alarm-contributor-state-change.json")
    event["detail"]["alarmContributor"]["attributes"] = {"ClusterName": "ml-staging", "NodeName": NODE}
    before = len(world.sim.requests)

    result = run(world, event)

    assert result["outcome"] == "ignored"
    assert "names cluster ml-staging, not ml-prod" in result["reason"]
    assert world.sim.requests[before:] == []


def test_an_alert_labelled_with_another_cluster_is_ignored(world: World) -> None:
    # Given the captured idle notification for a 2-GPU node, its alerts labelled cluster=ml-staging
    # (Prometheus' external label, as a shared Alertmanager receives it)
    idle_cluster(world.sim, trainer=False, gpus=2)

    def relabel(message: str) -> str:
        doc: dict[str, Any] = json.loads(message)
        for alert in doc["alerts"]:
            alert["labels"]["cluster"] = "ml-staging"
        return json.dumps(doc)

    parsed = parse_event(with_message("alertmanager-sns-json.json", relabel))
    assert isinstance(parsed, AlertBatch)
    before = len(world.sim.requests)

    result = handle_alerts(parsed, world.deps(ALERTS_POLICY)).to_json()

    assert result["outcome"] == "ignored"
    assert "ml-staging" in result["reason"]
    assert world.sim.requests[before:] == []
    assert_untouched(world, NODE)
