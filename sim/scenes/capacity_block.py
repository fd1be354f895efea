"""Demo scene: a Capacity Block for ML ends. Planned from its delivery, scheduled on EventBridge
Scheduler (moto), checkpointed and drained `capacity_blocks.lead_minutes` before EC2 starts
terminating the block's instances; EC2's expiration warning then finds nothing left to save.

moto has no DescribeCapacityReservations: `sim.capacity_reservations` answers that one call.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sim.actors.capacity_reservations import Block, CapacityReservations
from sim.builders import gpu_node, job, training_pod
from sim.clock import rfc3339

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim
    from sim.scenes.base import SceneSummary

BLOCK = "cr-0a1b2c3d4e5f67890"
NODES = (
    ("ip-10-0-7-10.us-west-2.compute.internal", "i-0b10c000000000001", "signal:SIGUSR1"),
    ("ip-10-0-7-11.us-west-2.compute.internal", "i-0b10c000000000002", "annotate"),
)
GROUP = "gpuwarden-demo"
_SHOWN = {
    "capacity-block-planned": "planned",
    "scheduled": "scheduled",
    "cordon": "cordoned",
    "checkpoint-requested": "asked",
    "signal": "signalled",
    "evict": "evicted",
    "delete": "deleted",
    "replacement": "replacement",
    "drain-complete": "drained",
}


def _build(sim: KubeSim) -> None:
    for name, instance, mode in NODES:
        body = gpu_node(name, instance, instance_type="p5.48xlarge", capacity_type="reserved", zone="us-west-2a")
        body["metadata"]["labels"] |= {
            "karpenter.k8s.aws/capacity-reservation-id": BLOCK,
            "karpenter.k8s.aws/capacity-reservation-type": "capacity-block",
        }
        node = sim.create(body)
        owner = sim.create(job(f"pretrain-{instance[-1]}", "ml"))
        sim.create(training_pod(f"pretrain-{instance[-1]}-worker", node, checkpoint=mode, owner=owner, grace=30))


def _when(at: str, termination: datetime) -> str:
    from dateutil.parser import isoparse

    seconds = (termination - isoparse(at)).total_seconds()
    sign = "-" if seconds >= 0 else "+"
    minutes, rest = divmod(abs(int(seconds)), 60)
    return f"T{sign}{minutes:02d}:{rest:02d}"


def _print(actions: list[dict[str, Any]], termination: datetime, node: str = "") -> None:
    for action in actions:
        label = _SHOWN.get(action["type"])
        if label is None:
            continue
        what = action.get("pod") or str(action.get("target") or "").rsplit("/", 1)[-1] or node
        why = action.get("reason") or action.get("result") or ""
        if action["type"] == "drain-complete" and "seconds_left" in action:
            why = f"{action['seconds_left'] / 60:.1f} min before EC2 starts terminating"
        print(f"  {_when(action['at'], termination)}  {label:<13} {str(what)[:44]:<44} {str(why)[:90]}")


def capacity_block_scene(sim: KubeSim) -> SceneSummary:
    import boto3

    from gpuwarden.adapters.scheduler import EventBridgeScheduler
    from gpuwarden.domain.policy import Policy
    from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
    from gpuwarden.services.dispatch import handle_batch, handle_tick
    from sim.scenes.base import EVENTS, SceneSummary, checkpoint_counts
    from sim.wiring import sim_deps

    _build(sim)
    lead = 30
    blocks = CapacityReservations()
    deps = sim_deps(sim, caller="demo", policy=Policy.model_validate({"cluster": "ml-prod"}), reservations=blocks)
    boto3.client("scheduler", region_name="us-west-2").create_schedule_group(Name=GROUP)
    deps.scheduler = EventBridgeScheduler(
        GROUP,
        "arn:aws:lambda:us-west-2:123456789012:function:windows",
        "arn:aws:iam::123456789012:role/scheduler",
        "us-west-2",
    )
    now = sim.clock.now().replace(microsecond=0)
    end = now + timedelta(minutes=30 + lead + 2)
    termination = end - timedelta(minutes=30)
    blocks.add(Block(BLOCK, end))
    print(
        f"\nCapacity Block {BLOCK} (2 x p5.48xlarge) ends {rfc3339(end)}; "
        f"EC2 terminates its instances from T = {rfc3339(termination)}"
    )

    delivered = json.loads((EVENTS / "capacity-block-delivered.json").read_text())
    delivered["time"], delivered["detail"]["end-date"] = rfc3339(now), rfc3339(end)
    print(f"  {_when(rfc3339(now), termination)}  {'notice':<13} {delivered['detail_type']}")
    planned = handle_batch(parse_notices(delivered), deps).to_json()
    _print(planned["actions"], termination)

    client = boto3.client("scheduler", region_name="us-west-2")
    (schedule,) = client.list_schedules(GroupName=GROUP)["Schedules"]
    tick = json.loads(client.get_schedule(Name=schedule["Name"], GroupName=GROUP)["Target"]["Input"])
    fires = termination - timedelta(minutes=lead)
    sim.clock.advance(max(0.0, (fires - sim.clock.now()).total_seconds()))
    print(f"  {_when(rfc3339(sim.clock.now()), termination)}  {'schedule':<13} {schedule['Name']} fires")
    due = handle_tick(parse_scheduler_tick(tick), deps).to_json()
    timeline = [(a, r["node"].split(".")[0]) for r in due.get("results") or [due] for a in r["actions"]]
    for action, node in sorted(timeline, key=lambda pair: pair[0]["at"]):
        _print([action], termination, node)

    warning_at = end - timedelta(minutes=40)
    sim.clock.advance(max(0.0, (warning_at - sim.clock.now()).total_seconds()))
    warning = json.loads((EVENTS / "capacity-block-expiration-warning.json").read_text())
    warning["time"], warning["detail"]["end-date"] = rfc3339(sim.clock.now()), rfc3339(end)
    late = handle_batch(parse_notices(warning), deps).to_json()
    print(f"  {_when(warning['time'], termination)}  {'notice':<13} {warning['detail_type']}: ", end="")
    print(
        "nothing left to save"
        if all(r["outcome"] == "ignored" for r in late.get("results", [late]))
        else late["reason"]
    )
    results = due.get("results") or [due]
    actions = due["actions"]
    lefts = [r["seconds_left"] for r in results if r.get("seconds_left") is not None]
    return SceneSummary(
        scene="capacity block end",
        outcome=due["outcome"],
        nodes=len(results),
        checkpointed=checkpoint_counts(due)[1],
        evicted=sum(1 for a in actions if a["type"] in ("evict", "delete")),
        seconds_left=min(lefts) if lefts else None,
        asked=checkpoint_counts(due)[0],
    )
