"""A NodePool's own disruption budget on the real plane, read alike by gpuwarden and real Karpenter:
a pool whose budget allows no node for `Underutilized` and `Empty` (the seeds' "disable
consolidation during training"); one of its nodes empties. Karpenter's emptiness consolidation is
held (`DisruptionBlocked` on the pool), and gpuwarden's GPU-idle reclaim of the same node is
refused, naming the budget; nothing is written to the node (docs/cluster.md, "The NodePool's own
rules"; docs/realplane.md). Then the budget is raised and Karpenter consolidates the node: what it
writes while it disrupts, on each Karpenter pin, is what gpuwarden reads to stand aside."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch

from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    NODECLAIMS,
    NODEPOOLS,
    claims_naming_their_nodes,
    consolidating_pool,
    deployment,
    empty_node_held,
    requests_of,
    running,
    scene_cluster,
)
from tests.e2e.world import Cluster, answer, contributor_alarm, idle_utilization, invoke

pytestmark = [pytest.mark.timeout(600), pytest.mark.every_karpenter]

POOL = "gpu-no-consolidation"
NS = "train-budget"
BUDGETS = [{"nodes": "0", "reasons": ["Underutilized", "Empty"]}]
DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _until_deleted(c: Cluster, lister: Any, *args: Any, name: str, since: str) -> list[dict[str, Any]]:
    """Every state of object ``name`` from resourceVersion ``since`` until it is deleted, through one
    watch (no state between two reads is missed)."""
    seen: list[dict[str, Any]] = []
    watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]
    for event in watcher.stream(lister, *args, resource_version=since, timeout_seconds=150):
        obj = event["object"] if isinstance(event["object"], dict) else c.plain(event["object"])
        if obj["metadata"]["name"] != name:
            continue
        seen.append(obj)
        if event["type"] == "DELETED":
            return seen
    raise AssertionError(f"{name} not deleted within 150 s; its last state: {dump(seen[-1:])}")


def test_a_budget_of_zero_holds_real_karpenters_consolidation_and_gpuwardens_gpu_idle_alike(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    pool = consolidating_pool(POOL, policy="WhenEmptyOrUnderutilized", budgets=BUDGETS)
    with scene_cluster(plane, [NS], [pool]) as c:
        # Given two nodes of the pool, one 8-GPU pod on each
        on_pool = {"karpenter.sh/nodepool": POOL}
        c.apps.create_namespaced_deployment(NS, deployment("train", NS, 2, 8, node_selector=on_pool))
        running(c, NS, "app=train", 2)
        claims = {cl["metadata"]["name"] for cl in claims_naming_their_nodes(c, 2)}
        # and one node empties (its GPUs idle from then on)
        since = datetime.now(UTC).replace(microsecond=0)
        c.apps.patch_namespaced_deployment_scale("train", NS, {"spec": {"replicas": 1}})
        (kept_pod,) = running(c, NS, "app=train", 1)
        (empty,) = {n["metadata"]["name"] for n in c.nodes()} - {kept_pod["spec"]["nodeName"]}

        # Then real Karpenter sees the empty node and is held by the pool's budget
        blocked = empty_node_held(c, POOL, since, timeout=90)
        assert "blocking budget" in blocked["message"], dump(blocked)

        # When the fleet alarm's contributor for the empty node goes to ALARM
        instance_id = aws.instance_for_node(c.node(empty))
        idle_utilization(aws, instance_id, empty)
        before = len(requests_of(plane))
        result = answer(invoke(plane, aws, contributor_alarm(instance_id, empty), tmp_path, save_as="budget.gpu-idle"))

        # Then gpuwarden refuses too, naming the pool's budget, and writes nothing but its Event
        assert result["outcome"] == "ignored", dump(result)
        refusal = f"NodePool {POOL} budget #1 (nodes '0', reasons Underutilized, Empty) allows 0 of its 2 nodes"
        assert refusal in result["reason"], result["reason"]
        assert "for reason Empty" in result["reason"], result["reason"]
        writes = [
            e
            for e in requests_of(plane)[before:]
            if e["verb"] not in ("get", "list", "watch") and e["objectRef"].get("resource") != "events"
        ]
        assert not writes, dump(writes)
        node = c.node(empty)
        assert not node["spec"].get("unschedulable"), dump(node["spec"])
        # and both nodes are still there, neither being deleted
        assert {cl["metadata"]["name"] for cl in c.nodeclaims()} == claims, dump(c.nodeclaims())
        assert not [cl for cl in c.nodeclaims() if cl["metadata"].get("deletionTimestamp")]

        # When the pool's owner raises its budget, real Karpenter consolidates the empty node
        (empty_claim,) = [cl["metadata"]["name"] for cl in c.nodeclaims() if cl["status"]["nodeName"] == empty]
        claims_from = c.custom.list_cluster_custom_object(*NODECLAIMS)["metadata"]["resourceVersion"]
        nodes_from = c.core.list_node().metadata.resource_version
        c.custom.patch_cluster_custom_object(*NODEPOOLS, POOL, {"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}})
        claim_states = _until_deleted(
            c, c.custom.list_cluster_custom_object, *NODECLAIMS, name=empty_claim, since=claims_from
        )
        node_states = _until_deleted(c, c.core.list_node, name=empty, since=nodes_from)
        # Then, while it disrupts, the node carries the karpenter.sh/disrupted taint on every release;
        # the NodeClaim's DisruptionReason condition is written from v1.2 on (disruption/queue.go
        # markDisrupted), never by v1.0: gpuwarden's karpenter_deleting reads both signs
        # (services/engine/karpenter.py; docs/cluster.md, "Karpenter versions")
        taints = [{k: t.get(k) for k in DISRUPTED} for n in node_states for t in n["spec"].get("taints") or []]
        assert DISRUPTED in taints, dump(node_states[-1])
        reasons = {
            cond.get("reason")
            for cl in claim_states
            for cond in cl.get("status", {}).get("conditions", [])
            if cond["type"] == "DisruptionReason" and cond["status"] == "True"
        }
        assert reasons == (set() if plane.karpenter.name == "karpenter-oldest" else {"Empty"}), dump(claim_states[-1])
