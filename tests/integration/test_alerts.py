"""Alertmanager notifications through the services on the simulator (docs/gpu-signals.md): a
gpu-idle alert is its own evidence, a truncated message acts on what survived, and a notification
that asks nothing is one ignored answer in the ledger. Messages: the samples captured from the real
Alertmanager (events/alertmanager-sns-*.json), edited where the test says so."""

from __future__ import annotations

import json
from typing import Any

from gpuwarden.kinds.inputs import parse_event
from gpuwarden.services.dispatch import handle_alerts
from gpuwarden.sources import AlertBatch
from tests.alert_policy import ALERTS_POLICY
from tests.integration.conftest import World, load_event
from tests.integration.gpu_idle_cluster import assert_untouched, idle_cluster
from tests.integration.inputs import with_message
from tests.integration.scenarios import NODE

#: The per-GPU captures' nodes (events/README.md): an 8-GPU node with GPUs 0-1 busy, a 2-GPU idle node.
BUSY = NODE
IDLE = "ip-10-0-2-40.us-west-2.compute.internal"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def batch(event: dict[str, Any]) -> AlertBatch:
    parsed = parse_event(event)
    assert isinstance(parsed, AlertBatch)
    return parsed


def test_a_gpu_idle_alert_reclaims_without_asking_cloudwatch(world: World) -> None:
    # Given the idle node with two GPUs, with no utilisation data at all in CloudWatch (moto is empty)
    idle_cluster(world.sim, trainer=False, gpus=2)

    # When the captured LowGPUUtilization notification (both GPUs of that node) arrives
    result = handle_alerts(batch(load_event("alertmanager-sns-json.json")), world.deps(ALERTS_POLICY)).to_json()

    # Then the node is reclaimed once: the alert is its own evidence
    assert result["kind"] == "gpu-idle"
    assert result["outcome"] == "handled", result["reason"]
    assert result["node"] == NODE
    assert [r["outcome"] for r in result["results"]] == ["handled", "ignored"]


def test_a_notification_that_asks_nothing_is_one_ignored_answer_in_the_ledger(world: World) -> None:
    idle_cluster(world.sim, trainer=False)
    resolved = with_message(
        "alertmanager-sns-json.json", lambda m: m.replace('"status":"firing"', '"status":"resolved"')
    )
    found = batch(resolved)

    result = handle_alerts(found, world.deps(ALERTS_POLICY)).to_json()

    assert result["outcome"] == "ignored"
    assert "only a firing alert is acted on" in result["reason"]
    assert world.ledger.get(found.message_id) is not None
    assert not [r for r in world.sim.requests if r.method in WRITES]


def test_a_truncated_notification_acts_on_what_survived_and_reports_the_rest(world: World) -> None:
    # Given a JSON notification cut after its first alert, with Alertmanager's `truncated` attribute,
    # for a one-GPU node (the surviving alert covers it; on a larger node it would not)
    idle_cluster(world.sim, trainer=False, gpus=1)
    event = load_event("alertmanager-sns-json.json")
    sns = event["Records"][0]["Sns"]
    message = sns["Message"]
    sns["Message"] = message[: message.index('{"status"', message.index('"fingerprint"')) + 20]
    sns["MessageAttributes"] = {"truncated": {"Type": "String", "Value": "true"}}

    result = handle_alerts(batch(event), world.deps(ALERTS_POLICY)).to_json()

    assert result["outcome"] == "handled", result["reason"]
    assert "1 complete alerts read, the rest lost" in result["reason"]


def test_an_alert_for_a_node_outside_the_cluster_is_ignored_with_the_reason(world: World) -> None:
    idle_cluster(world.sim, trainer=False)
    elsewhere = with_message("alertmanager-sns-text.json", lambda m: m)  # its node is not in this cluster

    result = handle_alerts(batch(elsewhere), world.deps(ALERTS_POLICY)).to_json()

    assert result["kind"] == "gpu-unhealthy"
    assert result["outcome"] == "ignored"
    assert "is not a node of cluster ml-prod" in result["reason"]
    assert json.dumps(result)  # the answer is JSON


# --------------------------------------------------------------------------- one alert per GPU


def test_per_gpu_alerts_for_six_of_eight_gpus_leave_the_busy_node_alone(world: World) -> None:
    # Given the 8-GPU node whose GPUs 0-1 serve Triton
    idle_cluster(world.sim, trainer=False)
    before = len(world.sim.requests)

    # When real Alertmanager's notification for its six idle GPUs (the seed's rule, per GPU) arrives
    result = handle_alerts(
        batch(load_event("alertmanager-sns-per-gpu-partial.json")), world.deps(ALERTS_POLICY)
    ).to_json()

    # Then the node is not idle: ignored, naming the count, and the node is not written
    assert result["kind"] == "gpu-idle"
    assert result["outcome"] == "ignored"
    assert result["node"] == BUSY
    assert "cover 6 of the 8 GPUs" in result["reason"], result["reason"]
    assert_untouched(world, BUSY)
    written = [r for r in world.sim.requests[before:] if r.method in WRITES and "/events" not in r.path]
    assert not written, written


def test_the_same_two_alerts_cover_a_two_gpu_node_but_not_an_eight_gpu_one(world: World) -> None:
    # Given the captured notification for GPUs 0 and 1 of the samples' node, and that node with 8 GPUs
    idle_cluster(world.sim, trainer=False, gpus=8)

    # When it arrives
    result = handle_alerts(batch(load_event("alertmanager-sns-json.json")), world.deps(ALERTS_POLICY)).to_json()

    # Then two of eight is not idleness
    assert result["outcome"] == "ignored"
    assert "cover 2 of the 8 GPUs" in result["reason"]
    assert_untouched(world, BUSY)


def test_per_gpu_alerts_covering_every_gpu_reclaim_the_node(world: World) -> None:
    # Given the 2-GPU node, both GPUs idle
    idle_cluster(world.sim, trainer=False, node_name=IDLE, gpus=2)

    # When real Alertmanager's notification carries both GPUs' alerts (group_by [alertname, Hostname])
    result = handle_alerts(
        batch(load_event("alertmanager-sns-per-gpu-whole-node.json")), world.deps(ALERTS_POLICY)
    ).to_json()

    # Then the node is reclaimed, once
    assert result["outcome"] == "handled", result["reason"]
    assert result["node"] == IDLE
    assert world.node(IDLE)["spec"].get("unschedulable") is True


def test_an_alert_aggregated_by_node_covers_its_node(world: World) -> None:
    # Given the 2-GPU node
    idle_cluster(world.sim, trainer=False, node_name=IDLE, gpus=2)

    # When the README's rule aggregated by node fires for it (no GPU label)
    result = handle_alerts(batch(load_event("alertmanager-sns-by-node.json")), world.deps(ALERTS_POLICY)).to_json()

    # Then the one alert covers the node
    assert result["outcome"] == "handled", result["reason"]
    assert result["node"] == IDLE
