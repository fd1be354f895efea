"""Integration fixtures: the simulator over HTTP, moto for AWS, the real services and handlers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuwarden.adapters.ledger import MemoryLedger
from gpuwarden.domain.policy import Policy
from gpuwarden.services.engine.context import Deps
from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.stepped import SteppedClock
from sim.wiring import sim_deps

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str, **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    event.update(overrides)
    return event


def types(result: dict[str, Any]) -> list[str]:
    """The types of an answer's actions, in order."""
    return [a["type"] for a in result["actions"]]


@dataclass(frozen=True)
class LambdaContext:
    """The attributes Powertools reads from a Lambda context (no remaining time: no time budget)."""

    function_name: str = "gpuwarden-interruption"
    invoked_function_arn: str = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-interruption"
    memory_limit_in_mb: int = 512
    aws_request_id: str = "c6af9ac6-7b61-11e6-9a41-93e812345678"


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_REGION": "us-west-2",
        "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenTest",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)  # the CLI sets it in-process
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def aws() -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        yield


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(clock_speed=20.0) as running:
        yield running


@dataclass
class World:
    sim: KubeSim
    workloads: Workloads
    ledger: MemoryLedger

    def deps(self, policy: Policy | None = None, dry_run: bool = False) -> Deps:
        return sim_deps(self.sim, caller="test", policy=policy, ledger=self.ledger, dry_run=dry_run)

    def pod(self, key: str) -> dict[str, Any] | None:
        namespace, name = key.split("/")
        return self.sim.get("Pod", name, namespace)

    def node(self, name: str) -> dict[str, Any]:
        node = self.sim.get("Node", name)
        assert node is not None
        return node


@pytest.fixture
def world(sim: KubeSim, aws: None) -> World:
    return _world(sim)


@pytest.fixture
def stepped_world(aws: None) -> Iterator[World]:
    """A world whose clock moves only when the code under test sleeps (sim/stepped.py): a test
    that measures sim seconds (a wait, a timeout) gets the same answer however loaded the machine
    is, where the 20x clock turns a real-time stall of 3 s into a minute."""
    with KubeSim(clock_speed=0.0, clock=SteppedClock()) as sim:
        yield _world(sim)


def _world(sim: KubeSim) -> World:
    os.environ.pop("KUBECONFIG", None)
    # A Spot warning asks EC2 first (docs/events.md, "Finding the node"): moto's EC2 is made on
    # its first call, seconds of real time (minutes of the simulator's 20x clock), so it is made
    # here, before any scenario's deadline starts running.
    boto3.client("ec2", region_name="us-west-2").describe_instances()
    return World(sim=sim, workloads=Workloads(sim, delay=1.0).install(), ledger=MemoryLedger())
