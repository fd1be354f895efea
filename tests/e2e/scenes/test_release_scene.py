"""`gpuwarden release --all`, the way back, on the real plane: after a freeze wrote the NodePool's
budgets and a Spot drain was cut off mid-way (the process killed while it waited for a checkpoint,
as a Lambda that timed out), every mark gpuwarden left comes off and the pool's spec is as it was;
the replacement NodeClaim the drain launched keeps no hold and brings nothing of gpuwarden's onto
its node when Karpenter registers it; a second release changes nothing (docs/rollback.md,
docs/realplane.md)."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import NODEPOOLS, claim_ready, job, requests_of, running, scene_cluster
from tests.e2e.world import CLUSTER, GPUWARDEN, NODEPOOL, answer, gpuwarden_cli, gpuwarden_env, invoke, spot_warning

pytestmark = pytest.mark.timeout(600)

NS = "ml-release"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MONDAY_10 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
POLICY = {
    "cluster": CLUSTER,
    "windows": [
        {
            "name": "freeze",
            "schedule": "0 9 * * MON-FRI",
            "timezone": "UTC",
            "duration": "10h",
            "max_disruptions": 0,
            "gpu_limit": 16,
            "nodepools": [NODEPOOL],
        }
    ],
}


def ours(notes: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (notes or {}).items() if k.startswith(ann.PREFIX)}


def test_release_all_takes_back_every_mark_and_the_nodepool_exactly(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    with scene_cluster(plane, [NS]) as c:
        # Given a trainer that will not answer its checkpoint request in time (annotate, 110 s)
        notes = {ann.CHECKPOINT: "annotate", ann.CHECKPOINT_TIMEOUT: "110"}
        c.batch.create_namespaced_job(NS, job("trainer", NS, 4, annotations=notes))
        (trainer,) = running(c, NS, "app=trainer", 1)
        node, pod = trainer["spec"]["nodeName"], trainer["metadata"]["name"]
        pool_before = c.custom.get_cluster_custom_object(*NODEPOOLS, NODEPOOL)
        # and a freeze open on the pool (its budget and GPU cap written into it)
        tick = {"gpuwarden": "budget-window", "action": "open", "window": "freeze"}
        opened = answer(invoke(plane, aws, tick, tmp_path, policy=policy, now=MONDAY_10, save_as="release.open"))
        assert opened["outcome"] == "handled", dump(opened)
        written = c.custom.get_cluster_custom_object(*NODEPOOLS, NODEPOOL)
        assert written["spec"] != pool_before["spec"], dump(written["spec"])
        # and a Spot drain cut off while it waits for the trainer's checkpoint
        event = tmp_path / "spot.json"
        event.write_text(json.dumps(spot_warning(aws.instance_for_node(c.node(node)))))
        env = gpuwarden_env(plane, aws, policy=policy)
        drain = subprocess.Popen(
            [str(GPUWARDEN), "invoke", str(event)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:

            def asked() -> dict[str, Any] | None:
                found = c.plain(c.core.read_namespaced_pod(pod, NS))
                notes = found["metadata"].get("annotations") or {}
                return found if notes.get(ann.CHECKPOINT_REQUESTED) and notes.get(DO_NOT_DISRUPT) else None

            def replaced() -> str | None:
                record = (c.node(node)["metadata"].get("annotations") or {}).get(ann.REPLACEMENT, "")
                named = record.removeprefix("nodeclaim/") if record.startswith("nodeclaim/") else None
                return named if named in {n["metadata"]["name"] for n in c.nodeclaims()} else None

            plane.wait_for("the trainer asked and marked do-not-disrupt", asked, timeout=60)
            # and its replacement created, held (the mark names the claim before the create)
            claim_name = plane.wait_for("the replacement NodeClaim created", replaced, timeout=60)
        finally:
            drain.send_signal(signal.SIGKILL)
            drain.wait(timeout=10)
        marked = c.node(node)
        assert marked["spec"].get("unschedulable") is True
        assert ours(marked["metadata"].get("annotations")), dump(marked["metadata"])

        # When on-call releases everything
        release = ["release", "--all"]
        released = answer(gpuwarden_cli(plane, aws, release, policy=policy, now=MONDAY_10, save_as="release"))

        # Then the node is as before gpuwarden: schedulable, without its taint or annotations
        assert released["outcome"] == "handled", dump(released)
        node_after = c.node(node)
        assert not node_after["spec"].get("unschedulable"), dump(node_after["spec"])
        assert ann.TAINT_KEY not in {t["key"] for t in node_after["spec"].get("taints") or []}, dump(node_after["spec"])
        assert not ours(node_after["metadata"].get("annotations")), dump(node_after["metadata"])
        # and the trainer's do-not-disrupt (gpuwarden's, not its owner's) is gone; it still runs there
        pod_after = c.plain(c.core.read_namespaced_pod(pod, NS))
        assert DO_NOT_DISRUPT not in (pod_after["metadata"].get("annotations") or {}), dump(pod_after["metadata"])
        assert pod_after["spec"]["nodeName"] == node
        # and the NodePool's spec is exactly what its owner wrote, through the real CRD
        pool_after = c.custom.get_cluster_custom_object(*NODEPOOLS, NODEPOOL)
        assert pool_after["spec"] == pool_before["spec"], dump([pool_before["spec"], pool_after["spec"]])
        assert not ours(pool_after["metadata"].get("annotations")), dump(pool_after["metadata"])

        # and the replacement's hold is taken back: once Karpenter has registered it (before or after the
        # release), neither its NodeClaim nor its node carries anything of gpuwarden's
        claim, replacement = claim_ready(c, claim_name)
        for obj in (claim, replacement):
            notes = obj["metadata"].get("annotations") or {}
            assert not ours(notes), dump(obj["metadata"])
            assert DO_NOT_DISRUPT not in notes, dump(obj["metadata"])

        # When it is released again, Then nothing is written
        writes_before = len([e for e in requests_of(plane) if e["verb"] in ("patch", "update", "create", "delete")])
        again = answer(gpuwarden_cli(plane, aws, release, policy=policy, now=MONDAY_10, save_as="release.2"))
        assert again["outcome"] in ("handled", "ignored"), dump(again)
        writes = [e for e in requests_of(plane) if e["verb"] in ("patch", "update", "create", "delete")]
        assert len(writes) == writes_before, dump(writes[writes_before:])
