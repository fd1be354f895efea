"""Alertmanager notifications through the services on the simulator (docs/gpu-signals.md): a
gpu-idle alert is its own evidence, a truncated message acts on what survived, and a notification
that asks nothing is one ignored answer in the ledger. Messages: the samples captured from the real
Alertmanager (events/alertmanager-sns-*.json), edited where the test says so."""

from __future__ import annotations

import json
from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.services.dispatch import handle_alerts
from gpuwarden.sources import AlertBatch
from tests.integration.conftest import World, load_event
from tests.integration.test_gpu_idle import NODE, idle_cluster

POLICY = Policy(cluster="ml-prod", alerts={"LowGPUUtilization": "gpu-idle", "GPUXidError": "gpu-unhealthy"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def batch(event: dict[str, Any]) -> AlertBatch:
    parsed = parse_event(event)
    assert isinstance(parsed, AlertBatch)
    return parsed


def with_message(sample: str, edit: Any) -> dict[str, Any]:
    event = load_event(sample)
    sns = event["Records"][0]["Sns"]
    sns["Message"] = edit(sns["Message"])
    return event


def test_a_gpu_idle_alert_reclaims_without_asking_cloudwatch(world: World) -> None:
    # Given the idle node, with no utilisation data at all in CloudWatch (moto is empty)
    idle_cluster(world.sim, trainer=False)

    # When the captured LowGPUUtilization notification (two GPUs of that node) arrives
    result = handle_alerts(batch(load_event("alertmanager-sns-json.json")), world.deps(POLICY)).to_json()

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

    result = handle_alerts(found, world.deps(POLICY)).to_json()

    assert result["outcome"] == "ignored"
    assert "only a firing alert is acted on" in result["reason"]
    assert world.ledger.get(found.message_id) is not None
    assert not [r for r in world.sim.requests if r.method in WRITES]


def test_a_truncated_notification_acts_on_what_survived_and_reports_the_rest(world: World) -> None:
    # Given a JSON notification cut after its first alert, with Alertmanager's `truncated` attribute
    idle_cluster(world.sim, trainer=False)
    event = load_event("alertmanager-sns-json.json")
    sns = event["Records"][0]["Sns"]
    message = sns["Message"]
    sns["Message"] = message[: message.index('{"status"', message.index('"fingerprint"')) + 20]
    sns["MessageAttributes"] = {"truncated": {"Type": "String", "Value": "true"}}

    result = handle_alerts(batch(event), world.deps(POLICY)).to_json()

    assert result["outcome"] == "handled", result["reason"]
    assert "1 complete alerts read, the rest lost" in result["reason"]


def test_an_alert_for_a_node_outside_the_cluster_is_ignored_with_the_reason(world: World) -> None:
    idle_cluster(world.sim, trainer=False)
    elsewhere = with_message("alertmanager-sns-text.json", lambda m: m)  # its node is not in this cluster

    result = handle_alerts(batch(elsewhere), world.deps(POLICY)).to_json()

    assert result["kind"] == "gpu-unhealthy"
    assert result["outcome"] == "ignored"
    assert "is not a node of cluster ml-prod" in result["reason"]
    assert json.dumps(result)  # the answer is JSON
