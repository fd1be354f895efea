"""The checkpoint handshake on a Spot warning: timeouts, failed commands, Kubernetes Events, DRY_RUN."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.builders import gpu_node, job, training_pod
from tests.integration.conftest import World
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import INSTANCE, NODE, spot_node

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def one_trainer(world: World, checkpoint: str, timeout: int | None = None) -> str:
    """The samples' Spot node running one trainer with that checkpoint annotation (grace 2 s)."""
    node = world.sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    owner = world.sim.create(job("train", "ml"))
    pod = training_pod("train-worker", node, checkpoint=checkpoint, checkpoint_timeout=timeout, owner=owner, grace=2)
    world.sim.create(pod)
    return "ml/train-worker"


def action(result: dict[str, Any], type_: str, pod: str) -> dict[str, Any]:
    return next(a for a in result["actions"] if a["type"] == type_ and a.get("pod") == pod)


def waited(result: dict[str, Any], pod: str) -> timedelta:
    """Sim time from the checkpoint request to the eviction of ``pod``."""
    return isoparse(action(result, "evict", pod)["at"]) - isoparse(action(result, "checkpoint-requested", pod)["at"])


def test_signal_pod_that_never_acknowledges_is_evicted_at_its_timeout(world: World) -> None:
    # Given a trainer that asks for SIGUSR1 with a 5 s timeout, and never acknowledges, on a clock
    # at real speed: at 20x under load the first invocation's own work used up so much of the
    # notice that its checkpoint had only 1.4 s left (docs/reliability.md, "Sim time and machine load")
    world.sim.clock.set_speed(1.0)
    trainer = one_trainer(world, "signal:SIGUSR1", timeout=5)
    world.workloads.silent.add(trainer)
    # When the Spot warning arrives
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    # Then the signal was sent to PID 1, and the pod evicted once its 5 s had passed, not before
    assert result["outcome"] == "handled", result["reason"]
    assert [r.command for r in world.sim.exec_log] == [["kill", "-s", "USR1", "1"]]
    evict = action(result, "evict", trainer)
    assert evict["reason"] == "checkpoint timed out"
    assert timedelta(seconds=4) <= waited(result, trainer) < timedelta(seconds=8)
    assert world.pod(trainer) is None


def test_exec_checkpoint_that_exits_1_fails_and_is_evicted_at_once(world: World) -> None:
    # Given a trainer whose checkpoint command exits 1 (its timeout is the default 60 s), on a clock
    # at real speed: at 20x, the wall seconds of the first invocation's own work (clients, first
    # requests) under load 18 were 150 sim seconds, past the notice's deadline, and the pod was
    # rightly evicted as timed out (docs/reliability.md, "Sim time and machine load")
    world.sim.clock.set_speed(1.0)
    trainer = one_trainer(world, "exec:/bin/checkpoint --now")
    world.workloads.exit_codes[trainer] = 1
    # When the Spot warning arrives
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    # Then the failure is recorded (action, pod annotation, Warning Event) and the pod evicted right away
    assert result["outcome"] == "handled", result["reason"]
    assert [r.command for r in world.sim.exec_log] == [["/bin/checkpoint", "--now"]]
    failed = action(result, "checkpoint-failed", trainer)
    assert failed["reason"] == "exit 1"
    evict = action(result, "evict", trainer)
    assert evict["reason"] == "checkpoint failed: exit 1"
    # at once: on the failure, before the time its checkpoint had (`by`) ran out
    assert isoparse(evict["at"]) < isoparse(action(result, "checkpoint-requested", trainer)["by"])
    warnings = [e for e in world.sim.list("Event") if e["reason"] == "CheckpointFailed"]
    assert [e["type"] for e in warnings] == ["Warning"]


def test_every_step_leaves_a_kubernetes_event_on_the_node(world: World) -> None:
    # Given a Spot node with opted-in trainers and inference pods
    spot_node(world.sim, modes=("annotate", "exec:/bin/checkpoint"), inference=1, pdb_min_available=None, grace=2)
    # When the Spot warning is handled to the end
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    assert result["outcome"] == "handled", result["reason"]
    # Then the node carries an Event for the cordon, the checkpoints, the evictions, the replacement, the drain
    on_node = [e for e in world.sim.list("Event") if e["involvedObject"]["name"] == NODE]
    reasons = {e["reason"] for e in on_node}
    expected = {"GpuwardenCordoned", "CheckpointRequested", "PodEvicted", "ReplacementLaunched", "DrainCompleted"}
    assert expected <= reasons
    assert all(e["involvedObject"]["kind"] == "Node" for e in on_node)
    assert all(e["source"]["component"] == "gpuwarden" for e in on_node)


def test_dry_run_plans_every_pod_and_writes_nothing(world: World) -> None:
    # Given a Spot node with trainers in three modes, inference pods, a DaemonSet pod and a mirror pod
    scenario = spot_node(world.sim)
    world.sim.clear_requests()
    # When the Spot warning arrives with DRY_RUN
    result = handle_batch(parse_notices(spot_warning(world)), world.deps(dry_run=True)).to_json()
    # Then the outcome is dry-run, the plan names every pod with its step and reason
    assert result["outcome"] == "dry-run", result["reason"]
    plan = {step["pod"]: step for step in result["plan"]}
    every_pod = {*scenario.trainers.values(), *scenario.inference, scenario.daemonset_pod, scenario.mirror_pod}
    assert set(plan) == every_pod
    assert all(step["reason"] for step in plan.values())
    assert {plan[pod]["step"] for pod in scenario.trainers.values()} == {"signal"}
    assert {plan[pod]["step"] for pod in scenario.inference} == {"evict"}
    assert plan[scenario.daemonset_pod]["step"] == plan[scenario.mirror_pod]["step"] == "skip"
    # and the cluster saw not one write: no cordon, no annotation, no exec, no NodeClaim, no Event
    assert [f"{r.method} {r.path}" for r in world.sim.requests if r.method in WRITES] == []
    assert world.sim.exec_log == []
    assert world.node(scenario.node)["spec"].get("unschedulable") is not True
    assert world.sim.list("NodeClaim") == []
    assert world.sim.list("Event") == []
