"""Karpenter's expiry on the real plane: a NodePool whose nodes expire 75 s after their NodeClaim is
made; gpuwarden's reconcile finds the expiry inside `karpenter_expiry.lead_minutes` and drains the
node (the trainer checkpointed first, a replacement launched) before real Karpenter's expiration
controller deletes the NodeClaim, which it does forcefully all the same (docs/cluster.md, "Expiry";
docs/realplane.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump, tour_nodepool
from tests.e2e.scene import (
    Acknowledger,
    claim_ready,
    claims_naming_their_nodes,
    job,
    replacement_claim,
    requests_of,
    running,
    scene_cluster,
    times,
)
from tests.e2e.world import CLUSTER, answer, invoke, rfc3339

pytestmark = [pytest.mark.timeout(600), pytest.mark.every_karpenter]

POOL = "gpu-expiring"
NS = "ml-expiry"
EXPIRE_AFTER = timedelta(seconds=75)
RECONCILE = {"gpuwarden": "budget-window", "action": "reconcile"}
POLICY = {"cluster": CLUSTER, "karpenter_expiry": {"lead_minutes": 30}}


def expiring_pool() -> dict[str, Any]:
    pool = tour_nodepool(name=POOL)
    pool["spec"]["template"]["spec"]["expireAfter"] = f"{int(EXPIRE_AFTER.total_seconds())}s"
    return pool


def test_an_expiry_planned_by_gpuwarden_drains_before_real_karpenter_expires_the_node(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    with scene_cluster(plane, [NS], [expiring_pool()]) as c:
        # Given a trainer (annotate) on a node of a pool whose nodes expire 75 s after launch
        on_pool = {"karpenter.sh/nodepool": POOL}
        notes = {ann.CHECKPOINT: "annotate"}
        c.batch.create_namespaced_job(NS, job("trainer", NS, 8, annotations=notes, node_selector=on_pool))
        (trainer,) = running(c, NS, "app=trainer", 1)
        node = trainer["spec"]["nodeName"]
        (claim,) = claims_naming_their_nodes(c, 1)
        name = claim["metadata"]["name"]
        assert claim["spec"]["expireAfter"] == expiring_pool()["spec"]["template"]["spec"]["expireAfter"], dump(claim)
        expires = rfc3339(claim["metadata"]["creationTimestamp"]) + EXPIRE_AFTER

        # When gpuwarden's periodic reconcile runs: the expiry is inside the 30-minute lead
        with Acknowledger(plane, NS, "app=trainer") as trainers:
            result = answer(invoke(plane, aws, RECONCILE, tmp_path, policy=policy, save_as="expiry.reconcile"))
        reconciled = datetime.now(UTC)
        assert reconciled < expires, f"the reconcile ended {reconciled - expires} after the expiry: too slow a plane"

        # Then it drained the node at once: cordon, the trainer asked and answered, then evicted
        types = [a["type"] for a in result["actions"]]
        assert types.index("cordon") < types.index("checkpoint-requested") < types.index("evict"), dump(result)
        assert "drain-complete" in types, dump(result)
        assert trainers.acknowledged, "the trainer was never asked"
        drained = c.node(node)
        assert drained["metadata"]["annotations"].get(ann.KIND) == "karpenter-expiry", dump(drained["metadata"])
        replacement = replacement_claim(drained)

        # and real Karpenter's expiration controller deletes the NodeClaim all the same, after gpuwarden's drain
        def expired() -> list[dict[str, Any]] | None:
            found = [
                e
                for e in plane.audit()
                if e["verb"] == "delete"
                and e["objectRef"].get("resource") == "nodeclaims"
                and e["objectRef"].get("name") == name
                and e.get("responseStatus", {}).get("code") == 200
            ]
            return found or None

        (deleted, *_) = plane.wait_for(f"Karpenter expires NodeClaim {name}", expired, timeout=120)
        assert deleted["user"]["username"] == "karpenter", dump(deleted)
        deleted_at = rfc3339(deleted["stageTimestamp"])
        assert deleted_at >= expires - timedelta(seconds=1), (deleted_at, expires)
        ours = requests_of(plane)
        cordoned = [
            rfc3339(e["stageTimestamp"])
            for e in ours
            if e["verb"] == "patch" and e["objectRef"].get("resource") == "nodes" and e["objectRef"].get("name") == node
        ]
        evicted = times(ours, subresource="eviction", name=trainer["metadata"]["name"], code=201)
        assert cordoned, dump(ours[-20:])
        assert evicted, dump(ours[-20:])
        assert max([*cordoned, *evicted]) < deleted_at, (cordoned, evicted, deleted_at)
        # and the trainer runs again on gpuwarden's replacement (launched before the expiry)
        _, new_node = claim_ready(c, replacement)
        (moved,) = running(c, NS, "app=trainer", 1)
        assert moved["spec"]["nodeName"] == new_node["metadata"]["name"], dump(moved)
