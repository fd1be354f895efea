"""Scheduled maintenance (AWS Health scheduledChange) through the real services: the simulator,
moto's EventBridge Scheduler, and the CLI's local path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuwarden.adapters.scheduler import EventBridgeScheduler
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.kinds.scheduled_maintenance.use_case import plan_id_for
from gpuwarden.services.dispatch import handle_batch, handle_tick
from gpuwarden.services.engine.context import Deps
from tests.integration.conftest import EVENTS, World, load_event
from tests.integration.scenarios import spot_node

NIGHT = {"name": "night-cap", "schedule": "0 22 * * *", "timezone": "UTC", "duration": "8h", "max_disruptions": 1}
GROUP = "gpuwarden-test"
WINDOWS_FN = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-windows"
ROLE = "arn:aws:iam::123456789012:role/gpuwarden-scheduler"
EVENT_ID = "7bf73129-1428-4cd3-a780-95db273d1603"


def policy(*windows: dict[str, Any]) -> Policy:
    return Policy.model_validate({"cluster": "ml-prod", "windows": list(windows)})


def health_event(starts: datetime) -> dict[str, Any]:
    event = load_event("health-scheduled-maintenance.json")
    event["detail"]["startTime"] = format_datetime(starts.astimezone(UTC), usegmt=True)
    return event


def deps_at(world: World, when: datetime | None, p: Policy, scheduler: bool = True) -> Deps:
    deps = world.deps(p)
    if when is not None:
        deps.window_clock = lambda: when
    if scheduler:
        deps.scheduler = EventBridgeScheduler(GROUP, WINDOWS_FN, ROLE, "us-west-2")
    return deps


@pytest.fixture
def schedules(world: World) -> Any:
    client = boto3.client("scheduler", region_name="us-west-2")
    client.create_schedule_group(Name=GROUP)
    return client


def day_at(base: datetime, days: int, hour: int) -> datetime:
    return (base + timedelta(days=days)).replace(hour=hour, minute=0, second=0, microsecond=0)


def test_maintenance_is_planned_into_the_latest_window_before_it_even_one_straddling_the_start(
    world: World, schedules: Any
) -> None:
    # Given a node, a nightly window (22:00-06:00 UTC) and maintenance at 05:00 in three days
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    now = world.sim.clock.now()
    starts = day_at(now, 3, 5)
    expected = day_at(now, 2, 22)  # the night of day+2 closes after the start: its 7 hours before it count
    # When the AWS Health event arrives
    result = handle_batch(parse_notices(health_event(starts)), deps_at(world, None, policy(NIGHT))).to_json()
    # Then the drain is planned into that window, held on the node, not started yet
    stamp = expected.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert result["outcome"] == "handled", result["reason"]
    assert f"window 'night-cap' from {stamp}" in result["reason"]
    annotations = world.node(scenario.node)["metadata"]["annotations"]
    plan_id = plan_id_for(f"{EVENT_ID}:{scenario.instance_id}")
    assert annotations["gpuwarden.io/maintenance-plan"] == f"night-cap@{stamp}"
    assert annotations["gpuwarden.io/maintenance-plan-id"] == plan_id
    assert "gpuwarden.io/event-id" not in annotations
    assert not world.node(scenario.node)["spec"].get("unschedulable")
    assert world.pod(scenario.inference[0]) is not None
    # And one one-time schedule invokes the scheduled function with the maintenance-due tick
    schedule = schedules.get_schedule(Name=plan_id, GroupName=GROUP)
    assert schedule["ScheduleExpression"] == f"at({expected.strftime('%Y-%m-%dT%H:%M:%S')})"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["Target"]["Arn"] == WINDOWS_FN
    assert schedule["Target"]["RoleArn"] == ROLE
    tick = json.loads(schedule["Target"]["Input"])
    assert tick["action"] == "maintenance-due"
    assert tick["plan_id"] == plan_id
    assert parse_scheduler_tick(tick).plan_id == plan_id
    assert world.ledger.get(f"maintenance-plan#{plan_id}") is not None


def test_redelivery_finds_the_plan_and_does_not_schedule_twice(world: World, schedules: Any) -> None:
    spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    event = health_event(day_at(world.sim.clock.now(), 3, 5))
    deps = deps_at(world, None, policy(NIGHT))
    first = handle_batch(parse_notices(event), deps).to_json()
    again = handle_batch(parse_notices(event), deps).to_json()
    assert first["outcome"] == "handled"
    assert again["outcome"] == "duplicate"
    assert "already planned" in again["reason"]
    assert len(schedules.list_schedules(GroupName=GROUP)["Schedules"]) == 1
    # the ledger keeps the first outcome and counts the re-delivery
    entry = world.ledger.get(first["event_id"])
    assert entry is not None
    assert entry["outcome"] == "handled"
    assert entry["duplicates"] == 1


def test_due_plan_cordons_taints_checkpoints_and_drains(world: World, schedules: Any) -> None:
    # Given a maintenance planned into the night window
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    now = world.sim.clock.now()
    handle_batch(parse_notices(health_event(day_at(now, 3, 5))), deps_at(world, None, policy(NIGHT)))
    plan_id = plan_id_for(f"{EVENT_ID}:{scenario.instance_id}")
    # When the one-time schedule fires, with the window open
    due = deps_at(world, day_at(now, 2, 22) + timedelta(seconds=20), policy(NIGHT))
    result = handle_tick(parse_scheduler_tick({**due_input(schedules, plan_id)}), due).to_json()
    # Then the node is cordoned with the scheduled-maintenance taint, the trainer checkpointed, all drained
    assert result["outcome"] == "handled", result["reason"]
    assert result["kind"] == "scheduled-maintenance"
    seen = [a["type"] for a in result["actions"]]
    assert seen[0] == "cordon"
    assert "checkpoint-requested" in seen
    assert result["drain"]["outcome"] == "drained"
    node = world.node(scenario.node)
    assert {"key": "gpuwarden.io/disruption", "value": "scheduled-maintenance", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    assert node["metadata"]["annotations"]["gpuwarden.io/kind"] == "scheduled-maintenance"
    assert world.pod(scenario.trainers["annotate"]) is None
    assert world.pod(scenario.inference[0]) is None


def due_input(schedules: Any, plan_id: str) -> dict[str, Any]:
    tick: dict[str, Any] = json.loads(schedules.get_schedule(Name=plan_id, GroupName=GROUP)["Target"]["Input"])
    return tick


def test_due_plan_waits_while_the_window_is_used_up(world: World, schedules: Any) -> None:
    # Given a plan due in night-cap (max 1) while another node of the pool is being disrupted
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    now = world.sim.clock.now()
    handle_batch(parse_notices(health_event(day_at(now, 3, 5))), deps_at(world, None, policy(NIGHT)))
    other = "ip-10-0-2-40.us-west-2.compute.internal"
    world.sim.patch_direct("Node", other, {"metadata": {"annotations": {"gpuwarden.io/kind": "gpu-idle"}}})
    plan_id = plan_id_for(f"{EVENT_ID}:{scenario.instance_id}")
    due_at = day_at(now, 2, 22) + timedelta(seconds=20)
    # When the plan falls due
    result = handle_tick(parse_scheduler_tick(due_input(schedules, plan_id)), deps_at(world, due_at, policy(NIGHT)))
    # Then it is refused by the window, by name, and asks again in 5 minutes
    assert result.outcome == "ignored"
    assert "window 'night-cap'" in result.reason
    retry = (due_at + timedelta(minutes=5)).strftime("%Y%m%d%H%M")
    names = {s["Name"] for s in schedules.list_schedules(GroupName=GROUP)["Schedules"]}
    assert names == {plan_id, f"{plan_id}-{retry}"}
    assert not world.node(scenario.node)["spec"].get("unschedulable")


def test_no_window_fits_so_the_node_is_drained_now_before_the_start(world: World, schedules: Any) -> None:
    # Given maintenance in 40 minutes: less than the 1 h a voluntary drain may take
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    starts = world.sim.clock.now() + timedelta(minutes=40)
    # When the event arrives
    result = handle_batch(parse_notices(health_event(starts)), deps_at(world, None, policy(NIGHT))).to_json()
    # Then the node is drained now, the reason says why, and the drain ends before the start
    assert result["outcome"] == "handled"
    assert "no allowed window of 1h00m fits before the maintenance starts" in result["reason"]
    assert "draining now" in result["reason"]
    assert result["drain"]["outcome"] == "drained"
    assert result["seconds_left"] > 0
    assert world.pod(scenario.trainers["annotate"]) is None
    assert schedules.list_schedules(GroupName=GROUP)["Schedules"] == []


def test_maintenance_for_an_instance_outside_the_cluster_is_ignored(world: World) -> None:
    event = health_event(world.sim.clock.now() + timedelta(days=2))
    result = handle_batch(parse_notices(event), deps_at(world, None, policy(NIGHT), scheduler=False)).to_json()
    assert result["outcome"] == "ignored"
    assert "is not a node of cluster ml-prod" in result["reason"]


# --------------------------------------------------------------------------- the CLI, locally


def invoke(world: World, tmp_path: Path, now: str, event: Path) -> dict[str, Any]:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"cluster": "ml-prod", "windows": [NIGHT]}))
    env = {
        **os.environ,
        "KUBECONFIG": str(world.sim.kubeconfig_path),
        "GPUWARDEN_POLICY_FILE": str(policy_file),
        "GPUWARDEN_NOW": now,
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    for key in ("GPUWARDEN_STATE_TABLE", "GPUWARDEN_SCHEDULE_GROUP"):
        env.pop(key, None)
    cli = Path(sys.executable).parent / "gpuwarden"
    done = subprocess.run([str(cli), "invoke", str(event)], env=env, capture_output=True, text=True, timeout=60)
    # GPUWARDEN_NOW is the windows' clock, not the drain's: the drain runs on the simulator's, months
    # after June's maintenance, so it reports that deadline as passed (exit 4, docs/cli.md#exit-codes)
    assert done.returncode in (0, 4), done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_cli_reports_the_plan_then_executes_the_due_tick(world: World, tmp_path: Path) -> None:
    # Given the sample node and the sample AWS Health event (maintenance at 2026-06-05T05:00Z)
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    # When it is invoked locally on Monday 1 June at noon (GPUWARDEN_NOW)
    # (the night of 4 June straddles the start: its hours before 05:00 are the latest allowed)
    planned = invoke(world, tmp_path, "2026-06-01T12:00:00Z", EVENTS / "health-scheduled-maintenance.json")
    # Then the plan is reported: the window and its start, and the tick to invoke then
    assert planned["outcome"] == "handled"
    assert "window 'night-cap' from 2026-06-04T22:00:00Z" in planned["reason"]
    skipped = next(a for a in planned["actions"] if a["type"] == "schedule-skipped")
    assert skipped["at"] == "2026-06-04T22:00:00Z"
    # When that tick is invoked inside the window
    tick_file = tmp_path / "due.json"
    tick_file.write_text(json.dumps(skipped["tick"]))
    done = invoke(world, tmp_path, "2026-06-04T22:00:30Z", tick_file)
    # Then the node is cordoned for scheduled maintenance and drained
    assert done["outcome"] == "handled", done["reason"]
    assert done["actions"][0]["type"] == "cordon"
    taints = world.node(scenario.node)["spec"]["taints"]
    assert {"key": "gpuwarden.io/disruption", "value": "scheduled-maintenance", "effect": "NoSchedule"} in taints


def test_a_do_not_disrupt_pod_is_asked_to_checkpoint_before_the_instance_goes_and_nothing_is_evicted(
    world: World, schedules: Any
) -> None:
    # Given an opted-in trainer that carries karpenter.sh/do-not-disrupt, beside a replica, no window
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    trainer = scenario.trainers["annotate"]
    namespace, name = trainer.split("/")
    protect = {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}
    world.sim.patch_direct("Pod", name, protect, namespace)
    starts = day_at(world.sim.clock.now(), 3, 5)
    # When AWS Health announces the maintenance three days ahead
    first = handle_batch(parse_notices(health_event(starts)), deps_at(world, None, policy())).to_json()
    # Then do-not-disrupt refuses the drain, nothing is asked yet, and the node is planned again for
    # the latest start that still leaves the drain's time before the deadline
    assert first["outcome"] == "ignored", first["reason"]
    assert f"pod {trainer} carries karpenter.sh/do-not-disrupt" in first["reason"]
    seen = [a["type"] for a in first["actions"]]
    assert "checkpoint-requested" not in seen
    assert "cordon" not in seen
    (planned,) = [a for a in first["actions"] if a["type"] == "maintenance-planned"]
    latest = datetime.fromisoformat(planned["start"].replace("Z", "+00:00"))
    assert starts - timedelta(hours=3) < latest < starts
    plan_id = plan_id_for(f"{EVENT_ID}:{scenario.instance_id}")
    # When that start comes
    due = deps_at(world, latest + timedelta(seconds=20), policy())
    result = handle_tick(parse_scheduler_tick(due_input(schedules, plan_id)), due).to_json()
    # Then the trainer is asked to checkpoint before AWS takes the instance, and nothing is evicted
    asked = [a["pod"] for a in result["actions"] if a["type"] == "checkpoint-requested"]
    assert asked == [trainer], result["actions"]
    assert f"pod {trainer} carries karpenter.sh/do-not-disrupt" in result["reason"]
    assert world.pod(trainer) is not None
    assert world.pod(scenario.inference[0]) is not None
    assert not world.node(scenario.node)["spec"].get("unschedulable")
