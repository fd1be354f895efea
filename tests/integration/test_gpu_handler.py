"""The GPU function as Lambda calls it (docs/gpu-signals.md): the every-minute scan tick and an
Alertmanager notification from the topic (the sample captured from a real Alertmanager), each
handled and handed to the drain workflow (a moto Step Functions state machine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.handlers import _runtime
from gpuwarden.handlers import gpu_signals as gpu_handler
from sim.builders import gpu_node, nodepool
from tests.integration.conftest import LambdaContext, World, load_event
from tests.integration.doctor_cli import by_check, doctor
from tests.integration.gpu_health_reports import failing
from tests.integration.lambda_env import executions, sim, state_machine

__all__ = ["sim", "state_machine"]
TEXT_NODE = "ip-10-0-2-40.us-west-2.compute.internal"
SCAN_TICK = {"gpuwarden": "gpu-health-scan", "scheduled_time": "2026-11-24T11:41:00Z", "execution_id": "e-1"}


@pytest.fixture
def policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"cluster": "ml-prod", "alerts": {"GPUXidError": "gpu-unhealthy"}}))
    monkeypatch.setenv("GPUWARDEN_POLICY_FILE", str(path))


def pool(world: World) -> None:
    world.sim.create(nodepool("gpu-training"))
    world.sim.create(gpu_node(TEXT_NODE, "i-0fedcba9876543210", nodepool="gpu-training"))
    for i in range(4):
        world.sim.create(
            gpu_node(f"ip-10-0-7-{i}.us-west-2.compute.internal", f"i-0cccc{i:012x}", nodepool="gpu-training")
        )


def test_the_scan_tick_handles_a_failing_node_and_hands_its_drain_to_the_workflow(
    world: World,
    state_machine: str,
    policy: None,
) -> None:
    pool(world)
    failing(world.sim, TEXT_NODE)

    answer = gpu_handler.handler(dict(SCAN_TICK), LambdaContext())

    assert answer["kind"] == "gpu-unhealthy"
    assert answer["outcome"] == "handled", answer
    assert [r["node"] for r in answer["results"]] == [TEXT_NODE]
    assert len(executions(state_machine)) == 1


def test_an_alertmanager_notification_from_the_topic_is_handled(world: World, state_machine: str, policy: None) -> None:
    pool(world)

    answer = gpu_handler.handler(load_event("alertmanager-sns-text.json"), LambdaContext())

    assert answer["kind"] == "gpu-unhealthy"
    assert answer["outcome"] == "handled", answer
    assert answer["node"] == TEXT_NODE
    node = world.node(TEXT_NODE)
    assert node["metadata"]["annotations"]["gpuwarden.io/kind"] == "gpu-unhealthy"
    assert len(executions(state_machine)) == 1


def test_a_notification_that_does_not_parse_raises_for_the_dead_letter_queue(
    world: World,
    state_machine: str,
    policy: None,
) -> None:
    event = load_event("alertmanager-sns-text.json")
    event["Records"][0]["Sns"]["Message"] = json.dumps({"not": "alertmanager"})

    with pytest.raises(InvalidEvent, match="alerts"):
        gpu_handler.handler(event, LambdaContext())
    assert not [r for r in world.sim.requests if r.method != "GET"]


# --------------------------------------------------------------------------- the alerts received, for doctor

STATE_TABLE = "gpuwarden-state"
EXPORTER_POD = "dcgm-exporter-x7k2p"  # what Hostname is when dcgm-exporter has neither NODE_NAME nor hostNetwork


@pytest.fixture
def state_table(monkeypatch: pytest.MonkeyPatch) -> str:
    """The stack's state table (infra/components/state_table.py keys) in moto, in the handlers' environment."""
    boto3.client("dynamodb", region_name="us-west-2").create_table(
        TableName=STATE_TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    monkeypatch.setenv("GPUWARDEN_STATE_TABLE", STATE_TABLE)
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()
    return STATE_TABLE


def doctor_after(world: World, tmp_path: Path, notification: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The GPU function receives ``notification``; then `gpuwarden doctor` runs with the same table."""
    answer = gpu_handler.handler(notification, LambdaContext())
    _, report = doctor(world.sim, tmp_path, "cluster: ml-prod\nalerts:\n  GPUXidError: gpu-unhealthy\n")
    return answer, by_check(report)["alert-node-labels"]


def test_doctor_names_the_alert_label_received_that_is_no_node_of_the_cluster(
    world: World, state_machine: str, state_table: str, policy: None, tmp_path: Path
) -> None:
    # Given a notification whose Hostname is dcgm-exporter's pod name (no NODE_NAME, no hostNetwork)
    pool(world)
    event = load_event("alertmanager-sns-text.json")
    sns = event["Records"][0]["Sns"]
    sns["Message"] = sns["Message"].replace(TEXT_NODE, EXPORTER_POD)
    # When the GPU function receives it, and the doctor runs afterwards
    answer, finding = doctor_after(world, tmp_path, event)
    # Then the alert was ignored as no node of the cluster, and the doctor names the label it carried
    assert answer["outcome"] == "ignored", answer
    assert finding["severity"] == "warn", finding
    assert f"GPUXidError: Hostname={EXPORTER_POD}" in finding["message"]
    assert "NODE_NAME" in finding["fix"]


def test_doctor_reads_the_alerts_received_that_name_nodes_as_ok(
    world: World, state_machine: str, state_table: str, policy: None, tmp_path: Path
) -> None:
    pool(world)
    answer, finding = doctor_after(world, tmp_path, load_event("alertmanager-sns-text.json"))
    assert answer["outcome"] == "handled", answer
    assert finding["severity"] == "ok", finding
    assert f"Hostname={TEXT_NODE}" in finding["message"]
    assert "the last alerts received (GPUXidError" in finding["message"]
