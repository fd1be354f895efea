"""Capacity Blocks for ML end to end on the simulator: planned from the delivery, scheduled on
EventBridge Scheduler (moto), drained with checkpoints before EC2 starts terminating the block;
an expiration warning with nothing planned; a missed delivery found by the reconcile.

moto (5.2) has no DescribeCapacityReservations: that one call is answered at the boto3 boundary
by `sim.actors.capacity_reservations` with the EC2 API reference's response shape; everything else is
moto (DescribeInstances, Scheduler) and the simulator.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest

from gpuwarden.adapters.scheduler import EventBridgeScheduler, at_expression
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.services.dispatch import handle_batch, handle_tick
from gpuwarden.services.engine.context import Deps
from sim.actors.capacity_reservations import Block, CapacityReservations
from sim.clock import rfc3339
from sim.wiring import sim_deps
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import BLOCK, BLOCKS_POLICY, INSTANCES, NODES, block_cluster

GROUP = "gpuwarden-test"
WINDOWS_FN = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-windows"
ROLE = "arn:aws:iam::123456789012:role/gpuwarden-scheduler"


@pytest.fixture
def blocks(world: World) -> CapacityReservations:
    return CapacityReservations()


@pytest.fixture
def schedules(world: World) -> Any:
    client = boto3.client("scheduler", region_name="us-west-2")
    client.create_schedule_group(Name=GROUP)
    return client


def deps_for(world: World, blocks: CapacityReservations) -> Deps:
    deps = sim_deps(world.sim, caller="test", policy=BLOCKS_POLICY, ledger=world.ledger, reservations=blocks)
    deps.scheduler = EventBridgeScheduler(GROUP, WINDOWS_FN, ROLE, "us-west-2")
    return deps


def delivered(end: datetime, at: datetime) -> dict[str, Any]:
    event = load_event("capacity-block-delivered.json")
    event["time"], event["detail"]["end-date"] = rfc3339(at), rfc3339(end)
    return event


def warning(at: datetime) -> dict[str, Any]:
    event = load_event("capacity-block-expiration-warning.json")
    event["time"], event["detail"]["end-date"] = rfc3339(at), rfc3339(at + timedelta(minutes=40))
    return event


def assert_checkpointed_then_gone(world: World, trainers: list[str]) -> None:
    for key in trainers:
        assert world.pod(key) is None, f"{key} still on its node"
    asked = set(world.workloads.acked)
    assert set(trainers) <= asked, (trainers, asked)


def test_a_delivered_block_is_planned_scheduled_and_drained_with_checkpoints_before_termination(
    world: World, blocks: CapacityReservations, schedules: Any
) -> None:
    # Given two nodes in a Capacity Block that ends in 1 h 0 min (EC2 terminates from 30 min before)
    trainers = block_cluster(world.sim)
    now = world.sim.clock.now()
    end = (now + timedelta(minutes=60)).replace(microsecond=0)
    blocks.add(Block(BLOCK, end))
    deps = deps_for(world, blocks)
    # When the block is delivered
    planned = handle_batch(parse_notices(delivered(end, now - timedelta(hours=23))), deps).to_json()
    # Then the drain is planned 20 min (lead_minutes) before termination starts, on the Scheduler
    start, stop = end - timedelta(minutes=50), end - timedelta(minutes=30)
    assert planned["outcome"] == "handled", planned["reason"]
    assert planned["kind"] == "capacity-block-plan"
    assert planned["deadline"] == rfc3339(stop)
    (schedule,) = schedules.list_schedules(GroupName=GROUP)["Schedules"]
    detail = schedules.get_schedule(Name=schedule["Name"], GroupName=GROUP)
    assert detail["ScheduleExpression"] == at_expression(start)
    tick = json.loads(detail["Target"]["Input"])
    assert (tick["action"], tick["plan_id"]) == ("capacity-block-due", BLOCK)
    assert [a["type"] for a in planned["actions"]] == ["capacity-block-planned", "scheduled"]
    # and the delivered event is in the ledger under its own id, as every handled notice is
    assert (world.ledger.get(planned["event_id"]) or {}).get("outcome") == "handled"
    # And nothing was done to the nodes yet
    assert all(not world.node(n)["spec"].get("unschedulable") for n in NODES)

    # When the schedule fires (sim time at the planned start)
    world.sim.clock.advance((start - world.sim.clock.now()).total_seconds())
    due = handle_tick(parse_scheduler_tick(tick | {"scheduled_time": rfc3339(start)}), deps).to_json()
    # Then both nodes are cordoned, their trainers checkpoint, and they are drained before termination starts
    assert due["outcome"] == "handled", due["reason"]
    assert due["kind"] == "capacity-block-plan"
    assert {r["node"] for r in due["results"]} == set(NODES)
    for result in due["results"]:
        assert result["deadline"] == rfc3339(stop)
        assert result["drain"]["done"], result
        assert result["seconds_left"] > 15 * 60  # minutes to spare
        types = [a["type"] for a in result["actions"]]
        assert types.index("checkpoint-requested") < types.index("evict")
    assert_checkpointed_then_gone(world, trainers)
    for node in NODES:
        annotations = world.node(node)["metadata"]["annotations"]
        assert annotations["gpuwarden.io/kind"] == "capacity-block-plan"
        assert annotations["gpuwarden.io/deadline"] == rfc3339(stop)
    # And the replacements are steered away from the expiring block
    claims = world.sim.list("NodeClaim")
    assert claims
    for claim in claims:
        assert {
            "key": "karpenter.k8s.aws/capacity-reservation-id",
            "operator": "NotIn",
            "values": [BLOCK],
        } in claim["spec"]["requirements"]

    # When EC2's expiration warning arrives 40 min before the end, Then nothing is left to save
    world.sim.clock.advance(max(0.0, (end - timedelta(minutes=40) - world.sim.clock.now()).total_seconds()))
    late = handle_batch(parse_notices(warning(world.sim.clock.now())), deps).to_json()
    assert late["kind"] == "capacity-block-expiry"
    assert all(r["outcome"] == "ignored" for r in late["results"]), late["reason"]


def test_an_expiration_warning_with_nothing_planned_drains_every_node_of_the_block_before_its_deadline(
    world: World, blocks: CapacityReservations
) -> None:
    # Given two nodes in a block nobody planned for
    trainers = block_cluster(world.sim)
    deps = deps_for(world, blocks)
    now = world.sim.clock.now()
    # When EC2 warns that the block's instances terminate in 10 minutes
    result = handle_batch(parse_notices(warning(now)), deps).to_json()
    # Then every node of the block is handled as a Spot interruption and drained before the deadline
    assert result["outcome"] == "handled", result["reason"]
    assert result["kind"] == "capacity-block-expiry"
    assert result["node"] is None  # the event names a reservation; each node has its own result
    assert {r["node"] for r in result["results"]} == set(NODES)
    # the ledger holds the warning under its own id, and each node's answer under that node's
    assert (world.ledger.get(result["event_id"]) or {}).get("outcome") == "handled"
    assert all((world.ledger.get(one["event_id"]) or {}).get("outcome") == "handled" for one in result["results"])
    for one in result["results"]:
        assert one["kind"] == "capacity-block-expiry"
        assert one["deadline"] == rfc3339(now + timedelta(minutes=10))
        assert one["drain"]["done"]
        assert one["seconds_left"] > 0
    assert_checkpointed_then_gone(world, trainers)


def test_an_expiration_warning_finds_unlabelled_nodes_through_their_instances_in_ec2(
    world: World, blocks: CapacityReservations, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given nodes without Karpenter's reservation label (a managed node group in a Capacity Block)
    block_cluster(world.sim, labelled=False)
    deps = deps_for(world, blocks)
    # (moto's DescribeInstances knows no CapacityReservationId: the instances' records are EC2's shape)
    records = {i: {"InstanceId": i, "CapacityReservationId": BLOCK} for i in INSTANCES}
    monkeypatch.setattr(deps.cloud, "_instance", records.get)
    # When the warning arrives, Then both nodes are drained
    result = handle_batch(parse_notices(warning(world.sim.clock.now())), deps).to_json()
    assert {r["node"] for r in result["results"]} == set(NODES), result["reason"]


def test_a_missed_delivery_is_found_by_the_reconcile_and_planned(
    world: World, blocks: CapacityReservations, schedules: Any
) -> None:
    # Given nodes running in a block whose delivery event never arrived
    block_cluster(world.sim)
    end = world.sim.clock.now() + timedelta(hours=5)
    blocks.add(Block(BLOCK, end))
    deps = deps_for(world, blocks)
    # When the periodic reconcile runs
    tick = parse_scheduler_tick({"gpuwarden": "budget-window", "action": "reconcile"})
    result = handle_tick(tick, deps).to_json()
    # Then it found the block with DescribeCapacityReservations and scheduled its plan
    assert blocks.calls == [[BLOCK]]
    assert BLOCK in result["reason"]
    assert "capacity-block-planned" in [a["type"] for a in result["actions"]]
    (schedule,) = schedules.list_schedules(GroupName=GROUP)["Schedules"]
    assert schedule["Name"].startswith(f"capblock-{BLOCK}-")
    # And a second reconcile schedules nothing twice
    handle_tick(tick, deps)
    assert len(schedules.list_schedules(GroupName=GROUP)["Schedules"]) == 1


def test_an_extended_block_moves_its_plan_when_the_first_schedule_fires(
    world: World, blocks: CapacityReservations, schedules: Any
) -> None:
    # Given a planned block that was extended by a day after it was planned
    block_cluster(world.sim)
    end = world.sim.clock.now() + timedelta(minutes=55)
    blocks.add(Block(BLOCK, end + timedelta(days=1)))
    deps = deps_for(world, blocks)
    tick = parse_scheduler_tick({"gpuwarden": "budget-window", "action": "capacity-block-due", "plan_id": BLOCK})
    # When the first schedule fires
    result = handle_tick(tick, deps).to_json()
    # Then nothing is drained and the drain is planned for the new end
    assert result["outcome"] == "handled"
    assert "capacity-block-planned" in [a["type"] for a in result["actions"]]
    assert all(not world.node(n)["spec"].get("unschedulable") for n in NODES)
