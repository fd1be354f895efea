"""Budget windows written into a NodePool on the real plane, and obeyed by real Karpenter's own
disruption: a freeze's `{"nodes": "0"}` passes the real CRD and holds the emptiness consolidation
of a node that emptied while it is open; when the window closes the pool's budgets come back
exactly and Karpenter consolidates the node (docs/windows.md, docs/realplane.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    NODEPOOLS,
    claims_naming_their_nodes,
    consolidating_pool,
    deployment,
    empty_node_held,
    running,
    scene_cluster,
)
from tests.e2e.world import CLUSTER, Cluster, answer, invoke

pytestmark = pytest.mark.timeout(600)

POOL = "gpu-windows"
NS = "batch"
FREEZE = "business-hours-freeze"
MONDAY_10 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
MONDAY_20 = datetime(2026, 6, 1, 20, 0, tzinfo=UTC)
POLICY = {
    "cluster": CLUSTER,
    "windows": [
        {
            "name": FREEZE,
            "schedule": "0 9 * * MON-FRI",
            "timezone": "UTC",
            "duration": "10h",
            "max_disruptions": 0,
            "nodepools": [POOL],
        }
    ],
}


def tick(action: str) -> dict[str, Any]:
    return {"gpuwarden": "budget-window", "action": action, "window": FREEZE}


def budgets(c: Cluster) -> list[dict[str, Any]]:
    pool = c.custom.get_cluster_custom_object(*NODEPOOLS, POOL)
    found: list[dict[str, Any]] = pool["spec"]["disruption"]["budgets"]
    return found


def test_a_freeze_written_into_the_nodepool_holds_real_karpenters_consolidation_until_it_closes(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    with scene_cluster(plane, [NS], [consolidating_pool(POOL)]) as c:
        # Given two nodes of a pool that consolidates an empty node after 5 s, one 8-GPU pod on each
        on_pool = {"karpenter.sh/nodepool": POOL}
        c.apps.create_namespaced_deployment(NS, deployment("sweep", NS, 2, 8, node_selector=on_pool))
        running(c, NS, "app=sweep", 2)
        claims = {cl["metadata"]["name"] for cl in claims_naming_their_nodes(c, 2)}
        own = budgets(c)

        # When the freeze opens (Monday 10:00): its budget is added to the pool's own, through the real CRD
        opened = answer(invoke(plane, aws, tick("open"), tmp_path, policy=policy, now=MONDAY_10, save_as="win.open"))
        assert opened["outcome"] == "handled", dump(opened)
        assert budgets(c) == [*own, {"nodes": "0"}], dump(budgets(c))
        # and one node empties while it is open
        since = datetime.now(UTC).replace(microsecond=0)
        c.apps.patch_namespaced_deployment_scale("sweep", NS, {"spec": {"replicas": 1}})
        running(c, NS, "app=sweep", 1)

        # Then real Karpenter sees the empty node and is held by the budget: both nodes stay
        blocked = empty_node_held(c, POOL, since)
        assert "blocking budget" in blocked["message"], dump(blocked)
        assert {cl["metadata"]["name"] for cl in c.nodeclaims()} == claims, dump(c.nodeclaims())
        assert not [cl for cl in c.nodeclaims() if cl["metadata"].get("deletionTimestamp")]

        # When the freeze closes (Monday 20:00): the pool's budgets come back exactly
        closed = answer(invoke(plane, aws, tick("close"), tmp_path, policy=policy, now=MONDAY_20, save_as="win.close"))
        assert closed["outcome"] == "handled", dump(closed)
        assert budgets(c) == own, dump(budgets(c))
        # Then real Karpenter consolidates the empty node
        plane.wait_for("the empty node consolidated", lambda: len(c.nodeclaims()) == 1, timeout=120)
        (kept,) = c.nodeclaims()
        (pod,) = running(c, NS, "app=sweep", 1)
        assert kept["status"]["nodeName"] == pod["spec"]["nodeName"]
