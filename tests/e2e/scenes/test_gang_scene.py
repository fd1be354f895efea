"""The seed's four-rank Indexed Job (`torchrun --nnodes=4`, one p4d.24xlarge per rank) on the real
plane: real Karpenter launches a node per rank, kube-scheduler binds the ranks, the Job controller
brings an evicted rank back; gpuwarden handles a Spot warning for rank 1's node
(docs/training-jobs.md, docs/realplane.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.placement import gang_zone
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    Acknowledger,
    claim_ready,
    claims_naming_their_nodes,
    job,
    karpenter_kept,
    launched_as_written,
    replacement_claim,
    requests_of,
    running,
    scene_cluster,
    times,
)
from tests.e2e.world import answer, invoke, spot_warning

pytestmark = pytest.mark.timeout(600)

JOB = "llama-ddp"
RANKS = 4
DOOMED = "1"
INDEX = "batch.kubernetes.io/job-completion-index"
ZONE = "topology.kubernetes.io/zone"
#: How long the other ranks take to write their part of the checkpoint (the doomed rank answers at
#: once): its eviction must wait for the slowest.
OTHERS_TAKE = 1.5


def test_a_spot_warning_for_one_rank_checkpoints_the_gang_and_evicts_that_rank_after_all_answered(
    plane: Plane, aws: AwsWorld, tmp_path: Path
) -> None:
    with scene_cluster(plane, ["ml"]) as c:
        # Given the four ranks, one 8-GPU pod each: real Karpenter launches a node per rank
        c.batch.create_namespaced_job("ml", job(JOB, "ml", 8, ranks=RANKS, annotations={ann.CHECKPOINT: "annotate"}))
        pods = running(c, "ml", f"app={JOB}", RANKS)
        first_claims = {cl["metadata"]["name"] for cl in claims_naming_their_nodes(c, RANKS)}
        by_rank = {p["metadata"]["annotations"][INDEX]: p for p in pods}
        assert len({p["spec"]["nodeName"] for p in pods}) == RANKS, dump(pods)
        doomed = by_rank[DOOMED]
        doomed_name, node_name = doomed["metadata"]["name"], doomed["spec"]["nodeName"]
        others = {r: p for r, p in by_rank.items() if r != DOOMED}
        instance_id = aws.instance_for_node(c.node(node_name))

        # When EC2 warns rank 1's node, and the ranks answer as they finish their part
        takes = {doomed_name: 0.0} | {p["metadata"]["name"]: OTHERS_TAKE for p in others.values()}
        with Acknowledger(plane, "ml", f"app={JOB}", takes=takes.__getitem__) as ranks:
            result = answer(invoke(plane, aws, spot_warning(instance_id), tmp_path, save_as="gang-scene.invoke"))

        # Then the gang was asked as one: every rank once, and all four answered
        assert result["outcome"] == "handled", dump(result)
        asked = [a["pod"] for a in result["actions"] if a["type"] == "checkpoint-requested"]
        assert sorted(asked) == sorted(f"ml/{p['metadata']['name']}" for p in pods), asked
        (gang,) = result["checkpoints"]
        assert (gang["gang"], gang["by"]) == (f"ml/{JOB}", "job"), dump(gang)
        assert sorted(gang["acknowledged"]) == sorted(asked), dump(gang)
        assert not gang["timed_out"], dump(gang)
        assert sorted(ranks.acknowledged) == sorted(takes), ranks.acknowledged
        ours = requests_of(plane)

        # and rank 1 was evicted only after the last rank's answer; no other rank was touched
        acks = [
            e
            for e in plane.audit()
            if e["user"]["username"] == "kubernetes-admin"
            and e["verb"] == "patch"
            and e["objectRef"].get("resource") == "pods"
            and e["objectRef"].get("name") in takes
            and not e["objectRef"].get("subresource")
        ]
        assert len(acks) == RANKS, dump(acks)
        last_answer = max(times(acks, subresource=None, name=e["objectRef"]["name"], code=200)[0] for e in acks)
        (evicted_at,) = times(ours, subresource="eviction", name=doomed_name, code=201)
        assert evicted_at > last_answer
        evicted = {e["objectRef"]["name"] for e in ours if e["objectRef"].get("subresource") == "eviction"}
        assert evicted == {doomed_name}, evicted
        for rank, pod in others.items():
            now = c.core.read_namespaced_pod(pod["metadata"]["name"], "ml")
            assert (now.metadata.uid, now.spec.node_name) == (pod["metadata"]["uid"], pod["spec"]["nodeName"]), rank

        # and gpuwarden's one NodeClaim, in the gang's zone and off the interrupted pool, was launched
        # by real Karpenter; the Job controller's new rank 1 runs there, and Karpenter's provisioner
        # launched nothing for it
        claim_name = replacement_claim(c.node(node_name))
        claim, new_node = claim_ready(c, claim_name)
        launched_as_written(claim, new_node, interrupted=c.node(node_name))
        zones = [c.node(p["spec"]["nodeName"])["metadata"]["labels"][ZONE] for p in others.values()]
        assert new_node["metadata"]["labels"][ZONE] == gang_zone(zones), (zones, dump(new_node["metadata"]))

        def rank_back() -> list[dict[str, object]] | None:
            back = [
                p
                for p in running(c, "ml", f"app={JOB}", RANKS)
                if p["metadata"]["annotations"][INDEX] == DOOMED and p["metadata"]["name"] != doomed_name
            ]
            return back or None

        (back,) = plane.wait_for("rank 1 back on the replacement", rank_back, timeout=180)
        assert back["spec"]["nodeName"] == new_node["metadata"]["name"], dump(back)  # type: ignore[index]
        karpenter_kept(plane, c, claim_name, first_claims | {claim_name})
