"""The Scheduler's planned ticks delivered as the service delivers them: each kind that plans a
drain (scheduled maintenance, Capacity Blocks, Karpenter expiry) writes its one-time schedule to
EventBridge Scheduler (moto); the schedule is read back from moto, and at the instant its own
``at(...)`` names (`scheduler_delivery`) its Input goes to the deployed scheduled function's
handler (`gpuwarden.handlers.scheduled.handler`, its parsing and Powertools decorators included),
with the scene's simulator as its cluster. Nothing is delivered a second early; once delivered
the schedule is gone (``ActionAfterCompletion: DELETE``); the drain runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import boto3
import pytest

from gpuwarden.adapters.scheduler import EventBridgeScheduler
from gpuwarden.domain.policy import Policy
from gpuwarden.handlers import scheduled
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch, handle_tick
from gpuwarden.services.engine.context import Deps
from sim.actors.capacity_reservations import Block, CapacityReservations
from sim.builders import nodeclaim_for
from sim.clock import rfc3339
from sim.wiring import sim_deps
from tests.integration.conftest import LambdaContext, World, load_event
from tests.integration.scenarios import BLOCK, BLOCKS_POLICY, NODE, NODES, block_cluster, spot_node
from tests.integration.scheduler_delivery import Delivery, Target, at_of, deliver_due, schedules_of

GROUP = "gpuwarden-planned"
WINDOWS_ARN = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-windows"
ROLE = "arn:aws:iam::123456789012:role/gpuwarden-scheduler"
NIGHT = {"name": "night-cap", "schedule": "0 22 * * *", "timezone": "UTC", "duration": "8h", "max_disruptions": 1}


@pytest.fixture
def schedules(world: World) -> Any:
    client = boto3.client("scheduler", region_name="us-west-2")
    client.create_schedule_group(Name=GROUP)
    return client


def scene_deps(world: World, policy: Policy, blocks: CapacityReservations | None = None) -> Deps:
    deps = sim_deps(world.sim, caller="test", policy=policy, ledger=world.ledger, reservations=blocks)
    deps.scheduler = EventBridgeScheduler(GROUP, WINDOWS_ARN, ROLE, "us-west-2")
    return deps


def windows_function(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> dict[str, Target]:
    """The stack's scheduled function as the schedules' one target: its deployed handler, its
    dependencies the scene's (the seam `handlers.scheduled._deps`, as a warm container's)."""
    monkeypatch.setattr(scheduled, "_deps", lambda _own_arn: deps)
    context = LambdaContext("gpuwarden-windows", WINDOWS_ARN)
    return {WINDOWS_ARN: lambda event: scheduled.handler(event, context)}


def the_one_schedule_delivered_at_its_time(world: World, schedules: Any, targets: dict[str, Target]) -> Delivery:
    """The group's one schedule: not delivered a second before its time, delivered at it, then gone."""
    (schedule,) = schedules_of(schedules, GROUP)
    at = at_of(schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"])
    assert schedule["Target"]["Arn"] == WINDOWS_ARN
    world.sim.clock.advance((at - timedelta(seconds=1) - world.sim.clock.now()).total_seconds())
    assert deliver_due(schedules, GROUP, world.sim.clock.now(), targets) == []
    world.sim.clock.advance((at - world.sim.clock.now()).total_seconds())
    (delivery,) = deliver_due(schedules, GROUP, world.sim.clock.now(), targets)
    assert schedules_of(schedules, GROUP) == [], "the schedule outlived its delivery"
    assert parse_scheduler_tick(delivery.event).action.endswith("-due")
    return delivery


def test_a_maintenance_plan_is_delivered_as_its_window_opens(
    world: World, schedules: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a node with a trainer, a nightly window, and AWS Health maintenance at 05:00 in three days
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    deps = scene_deps(world, POLICY.model_validate({"cluster": "ml-prod", "windows": [NIGHT]}))
    starts = (world.sim.clock.now() + timedelta(days=3)).replace(hour=5, minute=0, second=0, microsecond=0)
    event = load_event("health-scheduled-maintenance.json")
    event["detail"]["startTime"] = format_datetime(starts.astimezone(UTC), usegmt=True)
    planned = handle_batch(parse_notices(event), deps).to_json()
    assert planned["outcome"] == "handled", planned["reason"]
    # When EventBridge Scheduler delivers the plan's tick at its time (the window's first second)
    answer = the_one_schedule_delivered_at_its_time(world, schedules, windows_function(deps, monkeypatch)).answer
    # Then the scheduled function drains the node inside the window, the trainer checkpointed first
    assert answer["outcome"] == "handled", answer["reason"]
    assert answer["kind"] == "scheduled-maintenance"
    assert answer["drain"]["outcome"] == "drained", answer["drain"]
    assert world.pod(scenario.trainers["annotate"]) is None
    assert world.node(scenario.node)["spec"].get("unschedulable") is True


def test_a_capacity_block_plan_is_delivered_before_ec2_starts_terminating(
    world: World, schedules: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two nodes of a Capacity Block that ends in an hour, delivered (planned: 20 min lead)
    trainers = block_cluster(world.sim)
    end = (world.sim.clock.now() + timedelta(minutes=60)).replace(microsecond=0)
    blocks = CapacityReservations()
    blocks.add(Block(BLOCK, end))
    deps = scene_deps(world, BLOCKS_POLICY, blocks)
    event = load_event("capacity-block-delivered.json")
    event["time"], event["detail"]["end-date"] = rfc3339(world.sim.clock.now() - timedelta(hours=23)), rfc3339(end)
    planned = handle_batch(parse_notices(event), deps).to_json()
    assert planned["outcome"] == "handled", planned["reason"]
    # When its tick is delivered at its time
    delivery = the_one_schedule_delivered_at_its_time(world, schedules, windows_function(deps, monkeypatch))
    # Then both nodes are drained, each trainer gone, before termination starts (30 min before the end)
    assert delivery.at == end - timedelta(minutes=50)
    answer = delivery.answer
    assert answer["outcome"] == "handled", answer["reason"]
    assert {r["node"] for r in answer["results"]} == set(NODES)
    assert all(r["drain"]["done"] for r in answer["results"]), answer["results"]
    assert all(world.pod(key) is None for key in trainers)


def test_an_expiry_plan_is_delivered_its_lead_before_karpenter_expires_the_node(
    world: World, schedules: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a Karpenter node whose NodeClaim expires in 2 h (the lead: 30 min), and the reconcile
    spot_node(world.sim)
    claim = nodeclaim_for(world.node(NODE))
    claim["spec"]["expireAfter"] = "2h"
    created = world.sim.create(claim)
    expires = datetime.fromisoformat(created["metadata"]["creationTimestamp"]) + timedelta(hours=2)
    deps = scene_deps(world, POLICY.model_validate({"cluster": "ml-prod"}))
    reconciled = handle_tick(parse_scheduler_tick({"gpuwarden": "budget-window", "action": "reconcile"}), deps)
    assert "expiry-planned" in [a["type"] for a in reconciled.to_json()["actions"]], reconciled.to_json()
    # When its tick is delivered at its time
    delivery = the_one_schedule_delivered_at_its_time(world, schedules, windows_function(deps, monkeypatch))
    # Then the node is drained 30 min before Karpenter would expire it
    assert delivery.at == expires - timedelta(minutes=30)
    answer = delivery.answer
    assert answer["outcome"] == "handled", answer["reason"]
    assert answer["kind"] == "karpenter-expiry"
    assert world.node(NODE)["spec"].get("unschedulable") is True
