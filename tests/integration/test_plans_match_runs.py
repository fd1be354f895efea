"""Plans match runs (docs/cli.md#plans): for every runbook action and every sample event, what the dry
run (and `runbook plan`) says is what the run then does on the simulator, on the demo's cluster:
three opted-in trainers, two inference pods on the node under a PDB that allows one disruption,
a DaemonSet and a mirror pod; and a four-rank Indexed Job whose rank 1 runs on a node of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.policy import DrainPolicy, Policy
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch, handle_runbook
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps
from sim.builders import gpu_node
from sim.builders.owners import pdb
from sim.builders.pods import pod
from sim.clock import rfc3339
from sim.scenes.base import NODE, build_cluster
from sim.training_jobs import indexed_job_pod
from tests.integration.conftest import World, load_event

EVENTS = sorted((Path(__file__).resolve().parents[2] / "events").glob("*.json"))
ACTIONS = ("plan", "status", "cordon", "uncordon", "drain", "checkpoint", "replace")
TRITON = ("serving/triton-0", "serving/triton-1")
#: A PDB that holds a voluntary drain is given up on after 60 s (3 s on the sim, whose clock runs 20x).
POLICY = Policy(cluster="ml-prod", drain=DrainPolicy(voluntary_limit_seconds=60))


def gang_node(world: World) -> tuple[str, list[str]]:
    """A four-rank job beside the demo cluster; rank 1's node is returned with the ranks."""
    ranks = []
    nodes = []
    for rank in range(4):
        name = f"ip-10-0-7-{10 + rank}.us-west-2.compute.internal"
        node = world.sim.create(gpu_node(name, f"i-0b0b{rank:013x}", zone="us-west-2a"))
        nodes.append(name)
        pod = world.sim.create(indexed_job_pod("llama-ddp", rank, node, checkpoint="annotate"))
        ranks.append(f"ml/{pod['metadata']['name']}")
    return nodes[1], ranks


def pods_of(result: dict[str, Any], *types: str) -> set[str]:
    return {str(a["pod"]) for a in result["actions"] if a["type"] in types and a.get("pod")}


def steps(result: dict[str, Any], *names: str) -> set[str]:
    return {row["pod"] for row in result["plan"] if row["step"] in names}


def runbook(world: World, action: str, node: str, dry_run: bool) -> dict[str, Any]:
    request = parse_runbook({"action": action, "node": node, "dry_run": dry_run})
    return handle_runbook(request, runbook_deps(world.deps(POLICY), request)).to_json()


@pytest.mark.parametrize("action", ACTIONS)
def test_a_runbook_actions_dry_run_and_plan_say_what_the_action_then_does(world: World, action: str) -> None:
    # Given the demo's node, its inference pods under a PDB allowing one disruption
    build_cluster(world.sim)
    if action == "uncordon":
        runbook(world, "cordon", NODE, dry_run=False)
    # When the action is asked as a dry run, then run (`plan` and `status` only read: the drain runs)
    planned = runbook(world, action, NODE, dry_run=True)
    ran = runbook(world, "drain" if action in ("plan", "status") else action, NODE, dry_run=False)
    # Then the plan names every pod on the node once
    assert sorted(row["pod"] for row in planned["plan"]) == sorted(row["pod"] for row in ran["plan"])
    drains = action in ("plan", "status", "drain")
    asks, blocked = steps(planned, "signal"), steps(planned, "blocked")
    evicts = steps(planned, "evict", "signal") if drains else steps(planned, "evict")  # a drain evicts what it asks
    # And the pods it says are asked to checkpoint are the pods the run asked; a dry run claims no
    # acknowledgement it cannot have
    assert pods_of(ran, "checkpoint-requested") == asks
    assert pods_of(planned, "checkpoint-ack") == set()
    if action not in ("plan", "status"):
        assert pods_of(planned, "checkpoint-requested") == asks
    # And the pods it says are evicted are the pods the run evicted; as many as it says are blocked by
    # the PDB are (of two pods of one priority evicted at once, the API server admits either first)
    evicted, refused = pods_of(ran, "evict", "delete"), pods_of(ran, "eviction-blocked") - pods_of(ran, "evict")
    assert evicted - set(TRITON) == evicts - set(TRITON)
    assert (len(evicted & set(TRITON)), len(refused)) == (len(evicts & set(TRITON)), len(blocked))
    if drains:
        (pdb_blocked,) = blocked
        assert pdb_blocked in TRITON
        assert len(evicts & set(TRITON)) == 1
        row = next(r for r in planned["plan"] if r["pod"] == pdb_blocked)
        assert row["blocked_by"] == "serving/inference"
        assert refused < set(TRITON)
    else:  # the other actions move no pod
        assert evicts == blocked == set()
        assert steps(planned, "delete") == set()
    if action == "drain":
        assert pods_of(planned, "evict", "delete") == evicts
        assert pods_of(planned, "eviction-blocked") == blocked
    if action in ("cordon", "uncordon", "replace"):
        assert asks == set()
    # And a dry run's answer is in the conditional
    if action not in ("plan", "status"):
        assert planned["reason"].startswith("dry run: would"), planned["reason"]


def test_the_plan_for_a_rank_of_a_gang_asks_every_rank_as_the_checkpoint_does(world: World) -> None:
    # Given rank 1's node of a four-rank job whose ranks are slow to answer
    node, ranks = gang_node(world)
    world.workloads.silent.update(ranks)
    # When the plan is asked, then the checkpoint is run
    planned = runbook(world, "plan", node, dry_run=True)
    asked = runbook(world, "checkpoint", node, dry_run=False)
    # Then the plan says every rank is asked, as the checkpoint then asked them
    assert "would ask 4 pods to checkpoint (3 of them on other nodes" in planned["reason"], planned["reason"]
    # naming the three on other nodes (was: only the one on this node, in its plan row)
    assert all(rank in planned["reason"] for rank in ranks if rank != ranks[1]), planned["reason"]
    assert pods_of(asked, "checkpoint-requested") == set(ranks)
    (gang,) = asked["checkpoints"]
    assert sorted(gang["asked"]) == sorted(ranks)
    # And a Spot warning for rank 2's node, while that request is out, asks nobody again: its result
    # names the ranks as asked earlier, not as asked by it
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()), id="spot-rank-2")
    event["detail"]["instance-id"] = "i-0b0b0000000000002"
    warned = handle_batch(parse_notices(event), world.deps(POLICY)).to_json()
    assert pods_of(warned, "checkpoint-requested") == set()
    (gang,) = warned["checkpoints"]
    assert (gang["asked"], gang["asked_earlier"]) == ([], sorted(ranks))


def test_pending_pods_behind_a_pdb_are_planned_as_evicted_as_the_eviction_api_admits_them(world: World) -> None:
    # Given two pods bound to the node but still Pending (an image pull), under a PDB that allows no
    # disruption: kube-apiserver's `canIgnorePDB` lets a Pending pod go without reading any PDB
    build_cluster(world.sim)
    world.sim.create(pdb("warmup", "serving", {"app": "warmup"}, min_available=2))
    for name in ("warmup-0", "warmup-1"):
        pulling = pod(name, NODE, "serving", owner=("apps/v1", "ReplicaSet", "warmup-5c9"), labels={"app": "warmup"})
        pulling["status"] = {"phase": "Pending"}
        world.sim.create(pulling)
    # When the node is planned, then drained
    planned = runbook(world, "plan", NODE, dry_run=True)
    ran = runbook(world, "drain", NODE, dry_run=False)
    # Then the plan evicts them (was: blocked by serving/warmup), and the drain did
    pending = {"serving/warmup-0", "serving/warmup-1"}
    assert steps(planned, "evict") >= pending, planned["plan"]
    assert not steps(planned, "blocked") & pending
    assert pods_of(ran, "evict") >= pending
    assert not pods_of(ran, "eviction-blocked") & pending


def test_an_empty_node_is_planned_and_run_without_a_replacement(world: World) -> None:
    # Given the demo's node with its pods gone (a DaemonSet's pod and the mirror pod stay)
    build_cluster(world.sim)
    for obj in world.sim.list("Pod"):
        meta = obj["metadata"]
        owners = {ref["kind"] for ref in meta.get("ownerReferences", ())}
        if obj["spec"].get("nodeName") == NODE and not owners & {"DaemonSet", "Node"}:
            world.sim.delete_direct("Pod", meta["name"], meta["namespace"], grace_seconds=0)
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    # When the Spot warning is handled as a dry run, then for real
    planned = handle_batch(parse_notices(event), world.deps(POLICY, dry_run=True)).to_json()
    ran = handle_batch(parse_notices(event), world.deps(POLICY)).to_json()
    # Then neither launches capacity no pod needs (was: both, "requests : 0 pods"), and both say so
    for answer in (planned, ran):
        types = [a["type"] for a in answer["actions"]]
        assert "replacement" not in types, answer["actions"]
        assert "replacement-skipped" in types, answer["actions"]
    assert world.sim.list("NodeClaim") == [
        c for c in world.sim.list("NodeClaim") if "gpuwarden" not in c["metadata"]["name"]
    ]


@pytest.mark.parametrize("sample", EVENTS, ids=[p.stem for p in EVENTS])
def test_every_kinds_dry_run_says_what_its_run_then_does(world: World, sample: Path) -> None:
    # Given the demo's cluster, and a sample event (rebased on the simulator's clock where it carries a time)
    build_cluster(world.sim)
    event = json.loads(sample.read_text())
    if event.get("source") == "aws.ec2" and "time" in event:  # a warning as it arrives now
        event["time"] = rfc3339(world.sim.clock.now())
    try:
        notices = parse_notices(event)
    except Exception:  # a runbook payload or a scheduler tick: not a notice of a node
        pytest.skip("not a node notice")
    # When it is handled as a dry run, then for real
    planned = handle_batch(notices, world.deps(POLICY, dry_run=True)).to_json()
    ran = handle_batch(parse_notices(event), world.deps(POLICY)).to_json()
    if planned.get("outcome") != "dry-run" or ran.get("outcome") not in ("handled", "duplicate"):
        assert planned.get("outcome") in ("ignored", "failed", "dry-run", "handled"), planned
        return
    # Then the pods asked and the pods evicted are the dry run's
    assert pods_of(ran, "checkpoint-requested") == pods_of(planned, "checkpoint-requested")
    assert pods_of(planned, "checkpoint-ack") == set()
    if not planned.get("plan") or not pods_of(planned, "evict", "delete", "eviction-blocked"):
        return  # a notice that prepares the node and drains nothing
    evicted = pods_of(ran, "evict", "delete")
    assert pods_of(planned, "evict", "delete") == steps(planned, "evict", "signal", "delete")
    blocked = steps(planned, "blocked")
    # an involuntary kind deletes a pod still blocked at deadline - grace; a voluntary one never does
    involuntary = not world.deps().is_voluntary(planned["kind"])
    expected = steps(planned, "evict", "signal", "delete") | (blocked if involuntary else set())
    assert evicted == expected, (planned["plan"], ran["actions"])
