"""The seeds' own manifests on the real plane (sim/seeds/; docs/protections.md): real Karpenter and
gpuwarden side by side.

- Expiry: the seeds' `gpu-training` pool (its nodes expiring 75 s after launch here) and the seeds'
  `long-training-job` pod (do-not-disrupt, 300 s grace). gpuwarden's expiry drain, inside its lead,
  leaves the pod; real Karpenter's expiry deletes the NodeClaim and leaves it too. With no
  terminationGracePeriod no one deletes it and real Karpenter launches no node for it; with one,
  only real Karpenter does, and not before expiry + terminationGracePeriod - the pod's grace
  (`needsForceDelete`).
- Maintenance: a Health scheduled change 3.5 days ahead for a node of the same pool while its
  `nodes: "0"` budget is active (gpuwarden's clock set to a Monday 10:00 UTC), no gpuwarden window:
  nothing is written to the node, the drain is planned before the start, naming the budget.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import NODE_CLASS_REF, Plane, dump
from sim.seeds import LONG_TRAINING_JOB, TRAINING_POOL, nodepools, on_plane, workload
from tests.e2e.scene import IMAGE, claims_naming_their_nodes, requests_of, running, scene_cluster
from tests.e2e.world import CLUSTER, answer, invoke, rfc3339
from tests.integration.conftest import load_event

pytestmark = pytest.mark.timeout(600)

POOL = "seed-gpu-training"  # the plane's own tour pool is named gpu-training
NS = "ml-seeds"
EXPIRE_AFTER = timedelta(seconds=75)
RECONCILE = {"gpuwarden": "budget-window", "action": "reconcile"}
MONDAY = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def seed_pool(termination_grace: str | None = None, expire_after: str = "720h") -> dict[str, Any]:
    """The seeds' gpu-training pool as written, on the plane's node class and instance types."""
    pool = on_plane(nodepools()[TRAINING_POOL], NODE_CLASS_REF, ["p4d.24xlarge"])
    pool["metadata"]["name"] = POOL
    spec = pool["spec"]["template"]["spec"]
    spec["expireAfter"] = expire_after
    if termination_grace:
        spec["terminationGracePeriod"] = termination_grace
    return pool


def long_training_job() -> dict[str, Any]:
    """The seeds' pod as written, in the scene's namespace and pool, with the plane's image."""
    pod = workload("Pod", LONG_TRAINING_JOB)
    pod["metadata"]["namespace"] = NS
    pod["spec"]["nodeSelector"] = {"karpenter.sh/nodepool": POOL}
    pod["spec"]["containers"][0]["image"] = IMAGE
    return pod


def removals(plane: Plane, name: str) -> list[dict[str, Any]]:
    """Every eviction or delete of the pod the API server admitted, by anyone."""
    return [
        e
        for e in plane.audit()
        if (ref := e.get("objectRef") or {}).get("resource") == "pods"  # non-resource requests carry none
        and ref.get("name") == name
        and ref.get("namespace") == NS
        and (e["verb"] == "delete" or ref.get("subresource") == "eviction")
        and e.get("responseStatus", {}).get("code") in (200, 201)
    ]


def _pool_of(claim: dict[str, Any]) -> str:
    return str((claim["metadata"].get("labels") or {}).get("karpenter.sh/nodepool", ""))


def karpenter_expired(plane: Plane, claim: str) -> list[dict[str, Any]] | None:
    found = [
        e
        for e in plane.audit()
        if e["verb"] == "delete"
        and e["objectRef"].get("resource") == "nodeclaims"
        and e["objectRef"].get("name") == claim
        and e.get("responseStatus", {}).get("code") == 200
    ]
    return found or None


@pytest.mark.parametrize("termination_grace", [None, "360s"])
def test_an_expiry_leaves_the_seeds_do_not_disrupt_pod_as_real_karpenter_does(
    plane: Plane, aws: AwsWorld, tmp_path: Path, termination_grace: str | None
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"cluster": CLUSTER, "karpenter_expiry": {"lead_minutes": 30}}))
    pool = seed_pool(termination_grace, f"{int(EXPIRE_AFTER.total_seconds())}s")
    with scene_cluster(plane, [NS], [pool]) as c:
        # Given the seeds' long-training-job on a node of the seeds' training pool, expiring soon
        c.core.create_namespaced_pod(NS, long_training_job())
        (pod,) = running(c, NS, "app=long-training-job", 1)
        node = pod["spec"]["nodeName"]
        (claim,) = claims_naming_their_nodes(c, 1)
        name = claim["metadata"]["name"]
        expires = rfc3339(claim["metadata"]["creationTimestamp"]) + EXPIRE_AFTER

        # When gpuwarden's reconcile finds the expiry inside its lead and drains the node
        result = answer(invoke(plane, aws, RECONCILE, tmp_path, policy=policy, save_as="seeds.expiry"))
        assert datetime.now(UTC) < expires, "the reconcile ended after the expiry: too slow a plane"

        # Then the node is cordoned for the expiry and the drain completes without taking the pod
        types = [a["type"] for a in result["actions"]]
        assert "cordon" in types, dump(result)
        assert "drain-complete" in types, dump(result)
        assert c.node(node)["metadata"]["annotations"].get(ann.KIND) == "karpenter-expiry"
        assert not [a for a in result["actions"] if a.get("pod") == f"{NS}/{LONG_TRAINING_JOB}"], dump(result)

        # and real Karpenter's expiry deletes the NodeClaim, forcefully, after the drain
        (deleted, *_) = plane.wait_for(f"Karpenter expires {name}", lambda: karpenter_expired(plane, name), 120)
        deleted_at = rfc3339(deleted["stageTimestamp"])
        assert deleted_at >= expires - timedelta(seconds=1), (deleted_at, expires)
        ours = [e for e in requests_of(plane) if e["objectRef"].get("name") == LONG_TRAINING_JOB]
        assert not [e for e in ours if e["verb"] == "delete" or e["objectRef"].get("subresource")], dump(ours)

        if termination_grace is None:
            # and with no terminationGracePeriod, real Karpenter leaves the pod too: still running
            # well after the expiry, on a node Karpenter is terminating
            plane.wait_for(
                "30 s past Karpenter's expiry", lambda: datetime.now(UTC) > deleted_at + timedelta(seconds=30)
            )
            left = c.core.read_namespaced_pod(LONG_TRAINING_JOB, NS)
            assert left.metadata.deletion_timestamp is None, dump(left.to_dict())
            assert removals(plane, LONG_TRAINING_JOB) == [], dump(removals(plane, LONG_TRAINING_JOB))
            # and launches nothing for it (v1.14.1 `IsCurrentlyReschedulable`: a do-not-disrupt pod on a
            # deleting node is not scheduled), so emptiness has no node to take: the simulator's
            # Karpenter does the same (sim/actors/karpenter/provisioning.py)
            pool_claims = [cl["metadata"]["name"] for cl in c.nodeclaims() if _pool_of(cl) == POOL]
            assert pool_claims == [name], dump(c.nodeclaims())
            return
        # and with one, only real Karpenter deletes it, at deletion + terminationGracePeriod - its 300 s
        forced = deleted_at + timedelta(seconds=360) - timedelta(seconds=300)
        (first, *_) = plane.wait_for("Karpenter deletes the pod", lambda: removals(plane, LONG_TRAINING_JOB), 180)
        assert first["user"]["username"] == "karpenter", dump(first)
        assert rfc3339(first["stageTimestamp"]) >= forced - timedelta(seconds=1), (first["stageTimestamp"], forced)


def health_event(instance: str, starts: datetime) -> dict[str, Any]:
    event = load_event("health-scheduled-maintenance.json")
    event["detail"]["startTime"] = format_datetime(starts.astimezone(UTC), usegmt=True)
    event["detail"]["affectedEntities"] = [{"entityValue": instance}]
    event["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}"]
    return event


def test_maintenance_on_the_seeds_training_pool_obeys_its_nodes_zero_budget_with_no_window(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    with scene_cluster(plane, [NS], [seed_pool()]) as c:
        # Given the seeds' long-training-job on a node of the seeds' training pool (no gpuwarden window)
        c.core.create_namespaced_pod(NS, long_training_job())
        (pod,) = running(c, NS, "app=long-training-job", 1)
        node = pod["spec"]["nodeName"]
        instance = aws.instance_for_node(c.node(node))
        # When AWS Health schedules a change 3.5 days ahead, on a Monday 10:00 UTC (the pool's
        # `nodes: "0"` budget active then)
        before = len(requests_of(plane))
        event = health_event(instance, MONDAY + timedelta(days=3, hours=12))
        result = answer(invoke(plane, aws, event, tmp_path, now=MONDAY, save_as="seeds.maintenance"))
        # Then nothing is drained now: the plan names the pool's budget, and nothing is written to the pod
        assert result["outcome"] == "handled", dump(result)
        assert f"NodePool {POOL}" in result["reason"], result["reason"]
        (planned,) = [a for a in result["actions"] if a["type"] == "maintenance-planned"]
        assert planned["nodepool"] == POOL, dump(planned)
        assert not c.node(node)["spec"].get("unschedulable"), dump(c.node(node)["spec"])
        pod_writes = [
            e
            for e in requests_of(plane)[before:]
            if e["objectRef"].get("resource") == "pods" and e["verb"] not in ("get", "list", "watch")
        ]
        assert not pod_writes, dump(pod_writes)
