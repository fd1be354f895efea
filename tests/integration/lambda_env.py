"""The Lambda handlers' environment, for the tests that call the handlers as Lambda does: a simulator
on a real-time clock, and the drain workflow in moto (a one-state stand-in: these tests read only that
it was started, and with what) with the handlers' environment variables pointing at both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from gpuwarden.handlers import _runtime
from sim import KubeSim
from tests.integration.conftest import World

DEFINITION = {
    "StartAt": "Wait",
    "States": {"Wait": {"Type": "Wait", "SecondsPath": "$.wait_seconds", "End": True}},
}


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(clock_speed=1.0) as running:
        yield running


@pytest.fixture
def state_machine(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The drain workflow in moto, and the handlers' environment pointing at it and the simulator."""
    stepfunctions = boto3.client("stepfunctions", region_name="us-west-2")
    arn: str = stepfunctions.create_state_machine(
        name="gpuwarden-drain",
        definition=json.dumps(DEFINITION),
        roleArn="arn:aws:iam::123456789012:role/gpuwarden-drain",
    )["stateMachineArn"]
    monkeypatch.setenv("KUBECONFIG", str(world.sim.kubeconfig_path))
    monkeypatch.setenv("GPUWARDEN_DRAIN_STATE_MACHINE_ARN", arn)
    monkeypatch.setenv("GPUWARDEN_CLUSTER", "ml-prod")
    world.workloads.delay = 0.2
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()
    yield arn
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()


def executions(arn: str) -> list[dict[str, Any]]:
    stepfunctions = boto3.client("stepfunctions", region_name="us-west-2")
    found: list[dict[str, Any]] = stepfunctions.list_executions(stateMachineArn=arn)["executions"]
    return found
