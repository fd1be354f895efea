"""gpuwarden's replacement is one of its NodePool's nodes, on the real plane (docs/cluster.md, "One of
its NodePool's nodes"; docs/realplane.md, finding 3): real Karpenter sizes its own NodeClaim for a
trainer, gpuwarden's replacement for the same trainer asks the same; a change of the NodePool's
template marks gpuwarden's replacement `Drifted` like Karpenter's own claim, and while gpuwarden's
hold is on Karpenter leaves it; deleting the NodePool takes the replacement with it
(kube-controller-manager's garbage collector). The scene runs once; each test reads one part.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.quantity import parse_quantity
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump, tour_nodepool
from tests.e2e.scene import (
    NODECLAIMS,
    NODEPOOLS,
    Acknowledger,
    claim_ready,
    claims_naming_their_nodes,
    events_for,
    job,
    replacement_claim,
    running,
    scene_cluster,
)
from tests.e2e.world import GPUWARDEN_USER, Cluster, answer, condition, invoke, rebalance

pytestmark = pytest.mark.timeout(600)

POOL = "gpu-member"
ON_POOL = {"karpenter.sh/nodepool": POOL}
HASH = "karpenter.sh/nodepool-hash"
HASH_VERSION = "karpenter.sh/nodepool-hash-version"


@dataclass
class Story:
    pool: dict[str, Any]
    own: dict[str, Any]  # Karpenter's own NodeClaim (launched for the trainer)
    ours: dict[str, Any]  # gpuwarden's replacement, Ready
    prepared: dict[str, Any]
    hash_before: str
    hash_after: str
    own_drifted: dict[str, Any]
    ours_drifted: dict[str, Any]
    blocked: list[dict[str, Any]]
    ours_node_after_drift: dict[str, Any]
    deleted_by: list[str]


def _claim(c: Cluster, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = c.custom.get_cluster_custom_object(*NODECLAIMS, name)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def _drifted(c: Cluster, name: str) -> dict[str, Any] | None:
    claim = _claim(c, name)
    return claim if claim is not None and condition(claim, "Drifted") == "True" else None


def _pool_hash(c: Cluster, other_than: str) -> str | None:
    pool = c.custom.get_cluster_custom_object(*NODEPOOLS, POOL)
    value = (pool["metadata"].get("annotations") or {}).get(HASH)
    return str(value) if value and value != other_than else None


@pytest.fixture(scope="module")
def story(plane: Plane, aws: AwsWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    tmp = tmp_path_factory.mktemp("membership")
    with scene_cluster(plane, ["ml-member"], [tour_nodepool(name=POOL)]) as c:
        # Given a trainer (annotate, 4 GPUs, 1 CPU, 4 Gi) that its owner protects with
        # karpenter.sh/do-not-disrupt (Karpenter's drift leaves its node alone), on a node Karpenter launched
        notes = {ann.CHECKPOINT: "annotate", "karpenter.sh/do-not-disrupt": "true"}
        c.batch.create_namespaced_job(
            "ml-member", job("trainer", "ml-member", 4, annotations=notes, node_selector=ON_POOL)
        )
        (trainer,) = running(c, "ml-member", "app=trainer", 1)
        node = trainer["spec"]["nodeName"]
        (own,) = claims_naming_their_nodes(c, 1)
        instance_id = aws.instance_for_node(c.node(node))
        pool = c.custom.get_cluster_custom_object(*NODEPOOLS, POOL)
        hash_before = str((pool["metadata"].get("annotations") or {}).get(HASH))

        with Acknowledger(plane, "ml-member", "app=trainer"):
            # When EC2 recommends rebalancing it, gpuwarden launches its (held) replacement
            prepared = answer(invoke(plane, aws, rebalance(instance_id), tmp, save_as="membership-scene.prepare"))
        name = replacement_claim(c.node(node))
        ours, _ = claim_ready(c, name)

        # and the NodePool's template changes (a label on its nodes): Karpenter's hash changes
        patch = {"spec": {"template": {"metadata": {"labels": {"workload": POOL, "rev": "2"}}}}}
        c.custom.patch_cluster_custom_object(*NODEPOOLS, POOL, patch)
        hash_after = plane.wait_for("the NodePool's new hash", lambda: _pool_hash(c, hash_before), 60)
        own_drifted = plane.wait_for("Karpenter's own claim Drifted", lambda: _drifted(c, own["metadata"]["name"]), 120)
        ours_drifted = plane.wait_for("gpuwarden's replacement Drifted", lambda: _drifted(c, name), 120)
        blocked = plane.wait_for(
            "Karpenter's drift held on gpuwarden's replacement",
            lambda: events_for(c, "NodeClaim", name, "DisruptionBlocked") or None,
            120,
        )
        ours_node = c.node(ours["status"]["nodeName"])

        # When the NodePool is deleted
        c.custom.delete_cluster_custom_object(*NODEPOOLS, POOL)
        plane.wait_for(f"NodeClaim {name} gone with its NodePool", lambda: _claim(c, name) is None, 180)
        deleted_by = [
            e["user"]["username"]
            for e in plane.audit()
            if e["verb"] == "delete"
            and e["objectRef"].get("resource") == "nodeclaims"
            and e["objectRef"].get("name") == name
        ]
        # (scene_cluster deletes the pool again and finds it gone: recreate nothing)
        c.custom.create_cluster_custom_object(*NODEPOOLS, tour_nodepool(name=POOL))
        yield Story(
            pool=pool,
            own=own,
            ours=ours,
            prepared=prepared,
            hash_before=hash_before,
            hash_after=hash_after,
            own_drifted=own_drifted,
            ours_drifted=ours_drifted,
            blocked=blocked,
            ours_node_after_drift=ours_node,
            deleted_by=deleted_by,
        )


def test_the_replacement_asks_what_karpenters_own_claim_for_the_same_trainer_asks(story: Story) -> None:
    assert story.prepared["outcome"] == "handled", dump(story.prepared)
    own = story.own["spec"]["resources"]["requests"]
    ours = story.ours["spec"]["resources"]["requests"]
    assert {k: parse_quantity(v) for k, v in ours.items()} == {k: parse_quantity(v) for k, v in own.items()}, (
        own,
        ours,
    )


def test_the_replacement_is_owned_by_its_nodepool_and_carries_its_hash(story: Story) -> None:
    meta = story.ours["metadata"]
    pool = story.pool["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": POOL,
            "uid": pool["uid"],
            "blockOwnerDeletion": True,
        }
    ], dump(meta)
    # as Karpenter's own claim carries them
    assert meta["ownerReferences"] == story.own["metadata"]["ownerReferences"], dump(story.own["metadata"])
    assert meta["annotations"][HASH] == story.hash_before == story.own["metadata"]["annotations"][HASH]
    assert meta["annotations"][HASH_VERSION] == story.own["metadata"]["annotations"][HASH_VERSION]


def test_a_template_change_marks_it_drifted_like_karpenters_own_and_the_hold_keeps_it(story: Story) -> None:
    assert story.hash_after != story.hash_before
    for claim in (story.own_drifted, story.ours_drifted):
        drifted = next(c for c in claim["status"]["conditions"] if c["type"] == "Drifted")
        assert drifted["reason"] == "NodePoolDrifted", dump(claim["status"])
    # Drifted, not disrupted: gpuwarden's hold (karpenter.sh/do-not-disrupt) keeps it
    assert (story.ours_drifted["metadata"].get("annotations") or {}).get("karpenter.sh/do-not-disrupt") == "true"
    assert not story.ours_drifted["metadata"].get("deletionTimestamp"), dump(story.ours_drifted["metadata"])
    assert condition(story.ours_drifted, "DisruptionReason") is None, dump(story.ours_drifted["status"])
    taints = {t["key"] for t in story.ours_node_after_drift["spec"].get("taints") or []}
    assert "karpenter.sh/disrupted" not in taints, taints
    assert story.blocked, "no DisruptionBlocked Event on gpuwarden's replacement"


def test_deleting_the_nodepool_takes_the_replacement_too(story: Story) -> None:
    # kube-controller-manager's garbage collector deletes it first (the owner is gone), never gpuwarden;
    # Karpenter's own controllers may delete it again while its finalizer runs (seen on the plane:
    # the garbage collector, then 'karpenter' twice)
    assert story.deleted_by, "no delete of the replacement in the audit log"
    assert story.deleted_by[0] == "system:serviceaccount:kube-system:generic-garbage-collector", story.deleted_by
    assert GPUWARDEN_USER not in story.deleted_by, story.deleted_by
