"""A rebalance recommendation ("prepare"), then the Spot warning for the same node, on the real plane.

The NodePool consolidates an empty node 5 s after it empties (the tour's waits 10 min), so real
Karpenter says within seconds what it does with gpuwarden's pre-launched, still empty replacement
(docs/cluster.md, "Replacement capacity"; docs/realplane.md). The scene runs once; each test reads
one part of what happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    NODECLAIMS,
    Acknowledger,
    claim_ready,
    claims_naming_their_nodes,
    consolidating_pool,
    deployment,
    events_for,
    job,
    karpenter_kept,
    launched_as_written,
    pdb,
    replacement_claim,
    requests_of,
    running,
    scene_cluster,
)
from tests.e2e.world import Cluster, answer, invoke, rebalance, spot_warning

pytestmark = pytest.mark.timeout(600)

POOL = "gpu-rebalance"
ON_POOL = {"karpenter.sh/nodepool": POOL}


@dataclass
class Story:
    node: str
    first_claim: str
    prepared: dict[str, Any]
    node_after_prepare: dict[str, Any]
    claim: str
    #: what real Karpenter did with the empty replacement once it could consolidate it: "deleted",
    #: or "held" (a DisruptionBlocked event on it)
    verdict: str
    drained: dict[str, Any] = field(default_factory=dict)
    claims_after: set[str] = field(default_factory=set)
    moved_to: set[str] = field(default_factory=set)
    evictions_before_warning: int = 0


def _verdict(c: Cluster, claim: str) -> str | None:
    try:
        found = c.custom.get_cluster_custom_object(*NODECLAIMS, claim)
    except client.ApiException as err:
        return "deleted" if err.status == 404 else None
    if found["metadata"].get("deletionTimestamp"):
        return "deleted"
    return "held" if events_for(c, "NodeClaim", claim, "DisruptionBlocked") else None


@pytest.fixture(scope="module")
def story(plane: Plane, aws: AwsWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    tmp = tmp_path_factory.mktemp("rebalance")
    with scene_cluster(plane, ["serving-rb", "ml-rb"], [consolidating_pool(POOL)]) as c:
        # Given a trainer (annotate, 4 GPUs) and two inference replicas behind a PDB on one node of the pool
        serve = deployment("inference", "serving-rb", 2, 1, node_selector=ON_POOL)
        c.apps.create_namespaced_deployment("serving-rb", serve)
        c.policy.create_namespaced_pod_disruption_budget("serving-rb", pdb("inference", "serving-rb", 1))
        notes = {ann.CHECKPOINT: "annotate"}
        c.batch.create_namespaced_job("ml-rb", job("trainer", "ml-rb", 4, annotations=notes, node_selector=ON_POOL))
        serving = running(c, "serving-rb", "app=inference", 2)
        (trainer,) = running(c, "ml-rb", "app=trainer", 1)
        node = trainer["spec"]["nodeName"]
        assert {p["spec"]["nodeName"] for p in serving} == {node}, dump(serving)
        (first,) = claims_naming_their_nodes(c, 1)
        instance_id = aws.instance_for_node(c.node(node))

        with Acknowledger(plane, "ml-rb", "app=trainer"):
            # When EC2 recommends rebalancing it: gpuwarden prepares
            prepared = answer(invoke(plane, aws, rebalance(instance_id), tmp, save_as="rebalance-scene.prepare"))
            after_prepare = c.node(node)
            claim = replacement_claim(after_prepare)
            claim_ready(c, claim)
            # and once Karpenter can consolidate the still empty replacement (5 s after it is), what it does
            verdict = plane.wait_for(f"Karpenter's verdict on the empty {claim}", lambda: _verdict(c, claim), 120)
            evictions = [e for e in requests_of(plane) if e["objectRef"].get("subresource") == "eviction"]
            # When the Spot warning for the same node follows
            drained = answer(invoke(plane, aws, spot_warning(instance_id), tmp, save_as="rebalance-scene.spot"))
        moved = running(c, "serving-rb", "app=inference", 2) + running(c, "ml-rb", "app=trainer", 1)
        yield Story(
            node=node,
            first_claim=first["metadata"]["name"],
            prepared=prepared,
            node_after_prepare=after_prepare,
            claim=claim,
            verdict=verdict,
            drained=drained,
            claims_after={cl["metadata"]["name"] for cl in c.nodeclaims()},
            moved_to={p["spec"]["nodeName"] for p in moved},
            evictions_before_warning=len(evictions),
        )


def test_rebalance_prepares_taints_asks_and_launches_without_evicting(story: Story) -> None:
    result = story.prepared
    assert result["outcome"] == "handled", dump(result)
    types = [a["type"] for a in result["actions"]]
    assert "checkpoint-requested" in types, types
    assert "replacement" in types, types
    assert "evict" not in types, types
    assert story.evictions_before_warning == 0
    taints = [{k: t.get(k) for k in ("key", "value", "effect")} for t in story.node_after_prepare["spec"]["taints"]]
    assert {"key": ann.TAINT_KEY, "value": "rebalance", "effect": "NoSchedule"} in taints, taints


def test_the_spot_warning_drains_the_node_and_gpuwarden_launches_no_second_replacement(story: Story) -> None:
    result = story.drained
    assert result["outcome"] == "handled", dump(result)
    types = [a["type"] for a in result["actions"]]
    # the drain's last round takes back the replacement's hold once the moved pods run there
    assert set(types[types.index("drain-complete") + 1 :]) <= {"hold-released"}, types
    assert "replacement" not in types, types  # the node already names its replacement


def test_the_prepared_replacement_outlives_emptiness_consolidation_and_takes_the_pods(
    plane: Plane, story: Story
) -> None:
    assert story.verdict == "held"
    c = Cluster(plane)
    claim, node = claim_ready(c, story.claim, timeout=5)
    launched_as_written(claim, node)
    assert story.moved_to == {node["metadata"]["name"]}
    karpenter_kept(plane, c, story.claim, {story.first_claim, story.claim})
    # the hold (docs/cluster.md, "Replacement capacity"): taken back from the claim and its node once
    # the pods ran there, else still in place until the reconcile
    released = [a for a in story.drained["actions"] if a["type"] == "hold-released"]
    holds = [(o["metadata"].get("annotations") or {}).get("karpenter.sh/do-not-disrupt") for o in (claim, node)]
    assert holds == ([None, None] if released else ["true", "true"]), (released, holds)
