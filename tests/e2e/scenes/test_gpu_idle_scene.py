"""GPU-idle reclaim on the real plane: a fleet alarm's contributor names an idle node; gpuwarden drains
it, deletes its NodeClaim, and real Karpenter terminates it without bringing it back, because the
pods it moved fit on the node that stays (docs/gpu-idle.md, docs/realplane.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    Acknowledger,
    counted_by_karpenter,
    deployment,
    job,
    requests_of,
    running,
    scene_cluster,
)
from tests.e2e.world import answer, contributor_alarm, idle_utilization, invoke, rfc3339

pytestmark = pytest.mark.timeout(600)

NS = "research"


def test_an_idle_node_is_retired_and_real_karpenter_does_not_bring_it_back(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    with scene_cluster(plane, [NS]) as c:
        # Given a busy node: real Karpenter launches it for a 4-GPU server (its NodeClaim asks 4 GPUs,
        # so the KWOK node's capacity says 4 and its allocatable the p4d's 8); a filler takes the rest
        c.apps.create_namespaced_deployment(NS, deployment("busy", NS, 1, 4))
        (busy,) = running(c, NS, "app=busy", 1)
        busy_node = busy["spec"]["nodeName"]
        c.apps.create_namespaced_deployment(NS, deployment("filler", NS, 1, 4))
        (filler,) = running(c, NS, "app=filler", 1)
        assert filler["spec"]["nodeName"] == busy_node
        # and an idle node Karpenter launches for a reranker and a notebook (annotate) that found no room
        c.apps.create_namespaced_deployment(NS, deployment("reranker", NS, 1, 1))
        c.batch.create_namespaced_job(NS, job("notebook", NS, 1, annotations={ann.CHECKPOINT: "annotate"}))
        (reranker,) = running(c, NS, "app=reranker", 1)
        (notebook,) = running(c, NS, "app=notebook", 1)
        idle_node = reranker["spec"]["nodeName"]
        assert notebook["spec"]["nodeName"] == idle_node != busy_node
        claims = {cl["status"]["nodeName"]: cl["metadata"]["name"] for cl in counted_by_karpenter(c, 2)}
        # and the filler gone: the busy node has room for both again (by its allocatable)
        c.apps.delete_namespaced_deployment("filler", NS)
        plane.wait_for("the filler gone", lambda: not c.pods(NS, "app=filler"))
        instance_id = aws.instance_for_node(c.node(idle_node))
        idle_utilization(aws, instance_id, idle_node)

        # When the fleet alarm's contributor for the idle node goes to ALARM
        began = datetime.now(UTC)
        with Acknowledger(plane, NS, "app=notebook"):
            result = answer(invoke(plane, aws, contributor_alarm(instance_id, idle_node), tmp_path, save_as="gpu-idle"))

        # Then gpuwarden drained it (the notebook checkpointed first) and deleted its NodeClaim
        assert result["outcome"] == "handled", dump(result)
        types = [a["type"] for a in result["actions"]]
        assert types[0] == "cordon", types
        assert types.index("checkpoint-requested") < types.index("evict"), types
        assert "retire" in types, types
        deletes = [
            e["objectRef"]["name"]
            for e in requests_of(plane)
            if e["verb"] == "delete" and e["objectRef"].get("resource") == "nodeclaims"
        ]
        assert deletes == [claims[idle_node]], deletes
        # and real Karpenter terminated the node; the moved pods run on the busy node, and its
        # provisioner launched nothing for them: the node is not simply brought back
        plane.wait_for(f"{idle_node} gone", lambda: idle_node not in {n["metadata"]["name"] for n in c.nodes()}, 120)
        for selector in ("app=reranker", "app=notebook"):
            (moved,) = running(c, NS, selector, 1)
            assert moved["spec"]["nodeName"] == busy_node, dump(moved)
        assert {cl["metadata"]["name"] for cl in c.nodeclaims()} == {claims[busy_node]}, dump(c.nodeclaims())
        launched = [
            e
            for e in plane.audit()
            if e["verb"] == "create"
            and e["objectRef"].get("resource") == "nodeclaims"
            and rfc3339(e["stageTimestamp"]) > began
        ]
        assert not launched, dump(launched)
