"""The seeds' own protections hold on expiry and maintenance (issue 41, docs/protections.md), through the
real services against the simulator filled with the seed manifests (sim/seeds/): what real Karpenter
would leave, gpuwarden leaves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.services.dispatch import handle_batch, handle_runbook, handle_tick
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps
from sim.seeds import LONG_TRAINING_JOB, TRAINING_JOB, TRITON, SeedCluster, seed_cluster
from tests.integration.conftest import World, load_event

RECONCILE = {"gpuwarden": "budget-window", "action": "reconcile"}
POLICY = Policy.model_validate({"cluster": "ml-prod"})  # no gpuwarden window at all
#: Monday 10:00 UTC: inside gpu-training's `nodes: "0"` budget (mon-fri from 08:00 for 12 h).
MONDAY = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def reconcile(world: World) -> dict[str, Any]:
    return handle_tick(parse_scheduler_tick(RECONCILE), world.deps(POLICY)).to_json()


def pod_left(world: World, key: str) -> dict[str, Any]:
    found = world.pod(key)
    assert found is not None, f"{key} was taken"
    assert "deletionTimestamp" not in found["metadata"], f"{key} is being deleted"
    return found


def taken(result: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [a for a in result["actions"] if a.get("pod") == key and a["type"] in ("evict", "delete")]


@pytest.mark.parametrize("grace", [None, "1h"])
def test_an_expiry_leaves_the_seeds_do_not_disrupt_pod_as_karpenter_does(world: World, grace: str | None) -> None:
    # Given the seeds' cluster, long-training-job's NodeClaim expiring in 2 minutes (inside the 30-min lead)
    spec = {"expireAfter": "2m"} | ({"terminationGracePeriod": grace} if grace else {})
    made = seed_cluster(world.sim, claims={LONG_TRAINING_JOB: spec})
    (key,) = made.pods[LONG_TRAINING_JOB]
    # When the reconcile finds the expiry and gpuwarden drains the node
    result = reconcile(world)
    # Then the node is cordoned for the expiry, and the drain completes without the pod:
    # Karpenter's own drain never evicts it (IsEvictable), and forces it only at expiry + its
    # terminationGracePeriod (with none set, never)
    node = world.node(made.node_of[key])
    assert node["metadata"]["annotations"]["gpuwarden.io/kind"] == "karpenter-expiry"
    assert "drain-complete" in [a["type"] for a in result["actions"]], result["reason"]
    assert taken(result, key) == []
    pod_left(world, key)


def test_an_expiry_without_termination_grace_never_deletes_a_pod_its_pdb_protects(world: World) -> None:
    # Given Triton's three nodes expiring in 2 minutes, its PDB (minAvailable 2) and no terminationGracePeriod
    made = seed_cluster(world.sim, claims={TRITON: {"expireAfter": "2m"}})
    # When the reconcile drains them, and the drain runs past the expiry
    result = reconcile(world)
    # Then at most one replica was evicted (the PDB's one disruption), none deleted: Karpenter's
    # termination forces nothing without a terminationGracePeriod (needsForceDelete)
    types = [(a["type"], a.get("pod")) for a in result["actions"] if a.get("pod") in made.pods[TRITON]]
    assert ("delete", types[0][1]) not in types
    assert not [t for t in types if t[0] == "delete"], types
    assert len([t for t in types if t[0] == "evict"]) <= 1, types
    assert sum(1 for k in made.pods[TRITON] if world.pod(k) is not None) >= 2


def health_event(instance: str, starts: datetime) -> dict[str, Any]:
    event = load_event("health-scheduled-maintenance.json")
    event["detail"]["startTime"] = format_datetime(starts.astimezone(UTC), usegmt=True)
    event["detail"]["affectedEntities"] = [{"entityValue": instance}]
    event["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}"]
    return event


def rank_node(made: SeedCluster) -> tuple[str, str]:
    node = made.node_of[made.training_ranks()[0]]
    return node, made.instance_ids[node]


def test_maintenance_obeys_the_seeds_nodes_zero_budget_with_no_window_configured(world: World) -> None:
    # Given the seeds' cluster on a Monday morning (gpu-training's `nodes: "0"` budget active) and no windows
    made = seed_cluster(world.sim)
    node, instance = rank_node(made)
    starts = MONDAY + timedelta(days=3, hours=12)
    deps = world.deps(POLICY)
    deps.window_clock = lambda: MONDAY
    # When AWS Health schedules a change to a training node 3.5 days ahead
    result = handle_batch(parse_notices(health_event(instance, starts)), deps).to_json()
    # Then nothing is drained now: the drain is planned for the latest moment that ends before the
    # start, and the answer names the budget
    assert result["outcome"] == "handled", result["reason"]
    assert "nodes: '0'" in result["reason"] or "budget" in result["reason"], result["reason"]
    assert "gpu-training" in result["reason"], result["reason"]
    (planned,) = [a for a in result["actions"] if a["type"] == "maintenance-planned"]
    latest = starts - timedelta(seconds=POLICY.drain.voluntary_limit_seconds)
    assert planned["start"] == latest.isoformat().replace("+00:00", "Z"), planned
    assert planned["nodepool"] == "gpu-training"
    assert not world.node(node)["spec"].get("unschedulable")
    assert [a for a in result["actions"] if a["type"] in ("cordon", "evict")] == []
    for key in made.training_ranks():
        pod_left(world, key)


def test_a_runbook_drain_of_the_same_node_is_refused_by_the_same_budget(world: World) -> None:
    made = seed_cluster(world.sim)
    node, _ = rank_node(made)
    request = parse_runbook({"node": node, "action": "drain"})
    deps = runbook_deps(world.deps(POLICY), request)
    deps.window_clock = lambda: MONDAY
    result = handle_runbook(request, deps).to_json()
    assert result["outcome"] != "handled" or "refused" in result["reason"], result
    assert "gpu-training" in result["reason"]
    assert not world.node(node)["spec"].get("unschedulable")
    assert TRAINING_JOB in made.training_ranks()[0]
