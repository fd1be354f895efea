"""The on-call runbook on the real plane: `gpuwarden runbook plan`, then `drain`, of a node real
Karpenter launched; the displaced pods go to the one node Karpenter's provisioner launches for them
(a runbook drain launches no replacement of its own: docs/cli.md, docs/realplane.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    claim_ready,
    counted_by_karpenter,
    deployment,
    job,
    pdb,
    requests_of,
    running,
    scene_cluster,
    times,
)
from tests.e2e.world import answer, gpuwarden_cli, rfc3339

pytestmark = pytest.mark.timeout(600)

REASON = "INC-4711: Xid 79 on GPU 3, move the workloads off"


def test_a_runbook_drain_checkpoints_evicts_through_the_pdb_and_karpenter_launches_one_node(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    with scene_cluster(plane, ["serving-rn", "ml-rn"]) as c:
        # Given a trainer that checkpoints by a command (KWOK runs it here) and two replicas behind a PDB
        marker = plane.exec_dir / "runbook-checkpoints.log"
        notes = {ann.CHECKPOINT: f"exec:sh -c 'date -u +%s.%N >> {marker}'"}
        c.batch.create_namespaced_job("ml-rn", job("trainer", "ml-rn", 4, annotations=notes))
        c.apps.create_namespaced_deployment("serving-rn", deployment("inference", "serving-rn", 2, 1))
        c.policy.create_namespaced_pod_disruption_budget("serving-rn", pdb("inference", "serving-rn", 1))
        (trainer,) = running(c, "ml-rn", "app=trainer", 1)
        serving = running(c, "serving-rn", "app=inference", 2)
        node = trainer["spec"]["nodeName"]
        assert {p["spec"]["nodeName"] for p in serving} == {node}, dump(serving)
        # (and Karpenter has initialized the node: until then its pool's 10 % budget counts no node)
        (first,) = counted_by_karpenter(c, 1)

        # When on-call plans the drain: every pod's step, nothing changed
        plan = answer(gpuwarden_cli(plane, aws, ["runbook", "plan", "--node", node, "--json"], save_as="runbook.plan"))
        assert "refused" not in plan["reason"], dump(plan)
        steps = {row["pod"]: row["step"] for row in plan["plan"]}
        assert steps[f"ml-rn/{trainer['metadata']['name']}"] == "signal", dump(plan)
        # the real PDB allows one disruption of its two replicas: one evicted, one blocked (which one
        # is the eviction API's order, so the plan promises how many)
        assert sorted(steps[f"serving-rn/{p['metadata']['name']}"] for p in serving) == ["blocked", "evict"], dump(plan)
        assert not c.node(node)["spec"].get("unschedulable")
        # and drains it
        began = datetime.now(UTC)
        argv = ["runbook", "drain", "--node", node, "--reason", REASON, "--json"]
        drained = answer(gpuwarden_cli(plane, aws, argv, save_as="runbook.drain"))

        # Then it cordoned, asked the trainer (its command ran once through pods/exec), evicted
        # everything through the eviction API, the PDB holding the second replica until the first ran elsewhere
        assert drained["outcome"] == "handled", dump(drained)
        types = [a["type"] for a in drained["actions"]]
        assert types[0] == "cordon", types
        assert types.index("checkpoint-requested") < types.index("evict"), types
        assert types[-1] == "drain-complete", types
        assert len(marker.read_text().split()) == 1
        after = c.node(node)
        assert after["spec"].get("unschedulable") is True
        assert after["metadata"]["annotations"].get(ann.KIND) == "manual", dump(after["metadata"])
        ours = requests_of(plane)
        assert not [e for e in ours if e["verb"] == "delete" and e["objectRef"].get("resource") == "pods"]
        for pod in [trainer, *serving]:
            assert len(times(ours, subresource="eviction", name=pod["metadata"]["name"], code=201)) == 1
        blocked = [
            e
            for e in ours
            if e["objectRef"].get("subresource") == "eviction" and e.get("responseStatus", {}).get("code") == 429
        ]
        assert blocked, "the PDB never answered 429"
        # and the displaced pods run on the one node real Karpenter's provisioner launched for them
        moved = running(c, "serving-rn", "app=inference", 2) + running(c, "ml-rn", "app=trainer", 1)
        targets = {p["spec"]["nodeName"] for p in moved}
        assert len(targets) == 1, dump(moved)
        assert node not in targets
        launched = [
            e
            for e in plane.audit()
            if e["verb"] == "create"
            and e["objectRef"].get("resource") == "nodeclaims"
            and e.get("responseStatus", {}).get("code") == 201
            and rfc3339(e["stageTimestamp"]) > began
        ]
        assert [e["user"]["username"] for e in launched] == ["karpenter"], dump(launched)
        claims = {cl["metadata"]["name"]: cl for cl in c.nodeclaims()}
        assert len(claims) == 2, dump(claims)
        (new_claim,) = set(claims) - {first["metadata"]["name"]}
        claim_ready(c, new_claim)
