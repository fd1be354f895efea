"""The deployed windows and maintenance entry points, called as Lambda calls them (environment
as the stack sets it; EventBridge Scheduler in moto; the simulator over HTTP)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuwarden.handlers import _runtime
from gpuwarden.handlers import planning as maintenance_handler
from gpuwarden.handlers import scheduled as windows_handler
from gpuwarden.kinds.scheduled_maintenance.use_case import plan_id_for
from sim.builders import nodepool
from tests.integration.conftest import LambdaContext, World, load_event
from tests.integration.scenarios import spot_node

GROUP = "gpuwarden-schedules"
ROLE = "arn:aws:iam::123456789012:role/gpuwarden-scheduler"
WINDOWS_ARN = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-windows"
NIGHT = {"name": "night-cap", "schedule": "0 22 * * *", "timezone": "UTC", "duration": "8h", "max_disruptions": 1}
EVENT_ID = "7bf73129-1428-4cd3-a780-95db273d1603"
DLQ = "arn:aws:sqs:us-west-2:123456789012:gpuwarden-undelivered-ticks"


def reset() -> None:
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()
    windows_handler._deps.cache_clear()


@pytest.fixture
def deployed(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The environment the stack gives both functions, and the schedule group in moto."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"cluster": "ml-prod", "windows": [NIGHT]}))
    for key, value in {
        "KUBECONFIG": str(world.sim.kubeconfig_path),
        "GPUWARDEN_POLICY_FILE": str(policy),
        "GPUWARDEN_CLUSTER": "ml-prod",
        "GPUWARDEN_SCHEDULE_GROUP": GROUP,
        "GPUWARDEN_SCHEDULER_ROLE_ARN": ROLE,
        "GPUWARDEN_SCHEDULER_DLQ_ARN": DLQ,
    }.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("scheduler", region_name="us-west-2")
    client.create_schedule_group(Name=GROUP)
    reset()
    yield client
    reset()


def night_of(world: World, days: int) -> str:
    at = world.sim.clock.now() + timedelta(days=days)
    return at.replace(hour=22, minute=0, second=30, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_windows_handler_writes_the_nodepool_at_gpuwarden_now(
    world: World, deployed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.sim.create(nodepool("gpu-training"))
    monkeypatch.setenv("GPUWARDEN_NOW", "2026-06-01T22:00:30Z")
    context = LambdaContext("gpuwarden-windows", WINDOWS_ARN)
    result = windows_handler.handler(load_event("scheduler-window-open.json"), context)
    assert result["outcome"] == "handled", result["reason"]
    pool = world.sim.get("NodePool", "gpu-training")
    assert pool is not None
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}, {"nodes": "1"}]


def test_maintenance_handler_schedules_the_plan_on_the_windows_function(
    world: World, deployed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the planning function's environment (the scheduled function's ARN is given to it)
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    monkeypatch.setenv("GPUWARDEN_WINDOWS_FUNCTION_ARN", WINDOWS_ARN)
    starts = (world.sim.clock.now() + timedelta(days=3)).replace(hour=5, minute=0, second=0, microsecond=0)
    event = load_event("health-scheduled-maintenance.json")
    event["detail"]["startTime"] = format_datetime(starts, usegmt=True)
    # When AWS Health's event reaches it
    context = LambdaContext("gpuwarden-maintenance", "arn:aws:lambda:us-west-2:123456789012:function:m")
    result = maintenance_handler.handler(event, context)
    # Then the one-time schedule invokes the scheduled function with the Scheduler role
    assert result["outcome"] == "handled", result["reason"]
    plan_id = plan_id_for(f"{EVENT_ID}:{scenario.instance_id}")
    target = deployed.get_schedule(Name=plan_id, GroupName=GROUP)["Target"]
    assert (target["Arn"], target["RoleArn"]) == (WINDOWS_ARN, ROLE)
    assert target["DeadLetterConfig"] == {"Arn": DLQ}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 5, "MaximumEventAgeInSeconds": 3600}


def test_windows_handler_reschedules_a_refused_plan_on_itself(
    world: World, deployed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a held plan, and the window's one disruption taken by another node of the pool
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    plan_id = plan_id_for(f"{EVENT_ID}:{scenario.instance_id}")
    deadline = (world.sim.clock.now() + timedelta(days=3)).strftime("%Y-%m-%dT05:00:00Z")
    plan = {
        "gpuwarden.io/maintenance-plan": f"night-cap@{night_of(world, 1)}",
        "gpuwarden.io/maintenance-plan-id": plan_id,
        "gpuwarden.io/maintenance-event-id": f"{EVENT_ID}:{scenario.instance_id}",
        "gpuwarden.io/maintenance-deadline": deadline,
    }
    world.sim.patch_direct("Node", scenario.node, {"metadata": {"annotations": plan}})
    other = "ip-10-0-2-40.us-west-2.compute.internal"
    world.sim.patch_direct("Node", other, {"metadata": {"annotations": {"gpuwarden.io/kind": "gpu-idle"}}})
    monkeypatch.setenv("GPUWARDEN_NOW", night_of(world, 1))
    # When the plan falls due (no GPUWARDEN_WINDOWS_FUNCTION_ARN: the function's own ARN is a cycle)
    own = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-windows-Xyz:live"
    tick = {"gpuwarden": "budget-window", "action": "maintenance-due", "plan_id": plan_id}
    result = windows_handler.handler(tick, LambdaContext("gpuwarden-windows", own))
    # Then it is refused by name and asks again in 5 minutes, through this very function
    assert result["outcome"] == "ignored"
    assert "window 'night-cap'" in result["reason"]
    (schedule,) = deployed.list_schedules(GroupName=GROUP)["Schedules"]
    target = deployed.get_schedule(Name=schedule["Name"], GroupName=GROUP)["Target"]
    assert target["Arn"] == own
    assert json.loads(target["Input"])["plan_id"] == plan_id
