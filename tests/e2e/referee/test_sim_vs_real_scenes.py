"""The same scene on the real plane and on the simulator, and what gpuwarden did on each compared
(docs/realplane.md, "Sim against real").

The scene is built on the real plane as a user's cluster is (real Karpenter launches the node,
kube-scheduler binds the pods); just before the Spot warning its objects are copied into a fresh
simulator with Karpenter's, the ReplicaSet controller's and the workloads' stand-ins (the node,
its NodeClaim and NodePool, the pods and their owners, the PDB, as the API server holds them).
Then the same `gpuwarden invoke` on the same warning runs against each. Compared: gpuwarden's
answer (its actions, without times; the PDB's 429s only as "blocked at least once") and the end
state (the node's marks, which pods left the node and how, gpuwarden's NodeClaim as written).
Every difference is a finding: the simulator is fixed when it was wrong, gpuwarden when it was.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane
from tests.e2e.scene import (
    NODEPOOLS,
    claim_ready,
    claims_naming_their_nodes,
    replacement_claim,
    replicas_and_trainer,
    scene_cluster,
)
from tests.e2e.world import Cluster, answer, invoke, spot_warning

pytestmark = pytest.mark.timeout(600)

SERVING, ML = "serving-cmp", "ml-cmp"
#: what differs by construction between two API servers, never compared
_META_DROP = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")
#: actions whose count depends on how fast the other side answered (the PDB's 429 while the moved
#: replica starts, on whichever replica lost the race; the checkpoint's delivery and
#: acknowledgement are compared by pod)
_TIMING = ("eviction-blocked",)
_WRITTEN = ("requirements", "resources", "nodeClassRef", "taints")


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in _META_DROP}
    return {**obj, "metadata": meta}


def _snapshot(c: Cluster, node: str) -> dict[str, list[dict[str, Any]]]:
    """The objects of the scene as the API server holds them (what the simulator is given)."""
    plain = c.plain
    return {
        "NodePool": c.custom.list_cluster_custom_object(*NODEPOOLS)["items"],
        "NodeClaim": c.nodeclaims(),
        "Node": [c.node(node)],
        "ReplicaSet": [plain(r) for ns in (SERVING, ML) for r in c.apps.list_namespaced_replica_set(ns).items],
        "Job": [plain(j) for ns in (SERVING, ML) for j in c.batch.list_namespaced_job(ns).items],
        "Pod": [plain(p) for ns in (SERVING, ML) for p in c.core.list_namespaced_pod(ns).items],
        "PodDisruptionBudget": [
            plain(p) for ns in (SERVING, ML) for p in c.policy.list_namespaced_pod_disruption_budget(ns).items
        ],
    }


def _load(sim: Any, snapshot: dict[str, list[dict[str, Any]]]) -> None:
    """Create the snapshot's objects in the simulator, owners first, every owner reference pointing at
    the new owner's uid (the simulator gives its own)."""
    uids: dict[str, str] = {}
    for kind in ("NodePool", "NodeClaim", "Node", "ReplicaSet", "Job", "Pod", "PodDisruptionBudget"):
        for obj in snapshot[kind]:
            old_uid = obj["metadata"]["uid"]
            body = _clean(obj)
            refs = [
                {**r, "uid": uids[r["uid"]]} for r in body["metadata"].get("ownerReferences") or [] if r["uid"] in uids
            ]
            body["metadata"]["ownerReferences"] = refs
            if kind == "PodDisruptionBudget":
                body.pop("status", None)  # the simulator's disruption controller computes it
            made = sim.create({"apiVersion": obj.get("apiVersion"), "kind": kind, **body})
            uids[old_uid] = made["metadata"]["uid"]


def _actions(result: dict[str, Any]) -> Counter[tuple[str, ...]]:
    """gpuwarden's actions without times; per pod, and the 429s only as 'blocked at least once'."""
    seen: Counter[tuple[str, ...]] = Counter()
    for a in result["actions"]:
        key: tuple[str, ...] = (a["type"], str(a.get("pod") or a.get("target") or ""), str(a.get("reason") or ""))
        if a["type"] in _TIMING:
            # a wave's evictions go in parallel: which replica the PDB lets through first is a race on
            # either side, so a refusal is compared as "blocked at least once", neither by the pod it
            # fell on nor by its words: kube-apiserver's words depend on the disruption controller's lag
            # ("does not allow evicting pods currently" while an eviction it has not yet counted still
            # leaves currentHealthy above desiredHealthy: registry/core/pod/storage/eviction.go), which
            # the simulator, computing the status afresh on every eviction, does not have
            # (docs/realplane.md, finding 15)
            key = (a["type"],)
            if seen[key]:
                continue
        if a["type"] == "drain-complete":
            key = (a["type"],)
        if a["type"] == "hold-released":  # its reason names the replacement node: each provider names its own
            key = (a["type"], str(a.get("target")))
        seen[key] += 1
    return seen


#: marks whose value is when gpuwarden wrote it: the two sides run one after the other
_WHEN = (ann.DRAIN_STARTED, ann.DRAIN_COMPLETED, ann.CLAIMED_AT)


def _marks(node: dict[str, Any]) -> dict[str, Any]:
    notes = node["metadata"].get("annotations") or {}
    return {
        "unschedulable": bool(node["spec"].get("unschedulable")),
        "taints": sorted((t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints") or []),
        "annotations": {k: "(a time)" if k in _WHEN else v for k, v in notes.items() if k.startswith(ann.PREFIX)},
    }


#: labels a cloud provider adds of its own at launch: the KWOK provider's (the simulator models the
#: AWS provider's Karpenter, whose own karpenter.k8s.aws/* labels it does not add either)
_PROVIDERS_OWN: tuple[str, ...] = ("karpenter.kwok.sh/", "kwok.x-k8s.io/", "kwok-partition", "eks-node-viewer/")
_PROVIDERS_OWN += ("kubernetes.io/hostname",)
ZONE = "topology.kubernetes.io/zone"


def _as_written(claim: dict[str, Any]) -> dict[str, Any]:
    """The claim as gpuwarden wrote it and as every provider's launch labels it (Karpenter's
    PopulateNodeClaimDetails: the claim's single-valued requirements, the instance type's and the
    offering's), without the provider's own labels; the zone is the provider's pick among those the
    claim allows (cheapest offering first; equal prices tie differently), so only that it is allowed."""
    meta = claim["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(_PROVIDERS_OWN)}
    requirements = claim["spec"].get("requirements") or []
    allowed = [r["values"] for r in requirements if r["key"] == ZONE and r["operator"] == "In"]
    zone = labels.pop(ZONE, None)
    return {
        "labels": labels,
        "zone allowed": zone is not None and all(zone in values for values in allowed),
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(ann.PREFIX)},
        "spec": {k: v for k, v in claim["spec"].items() if k in _WRITTEN},
    }


@dataclass
class Both:
    real: dict[str, Any]
    sim: dict[str, Any]
    real_node: dict[str, Any]
    sim_node: dict[str, Any]
    real_claim: dict[str, Any]
    sim_claim: dict[str, Any]
    real_left: list[str]
    sim_left: list[str]
    launch_seconds: float


@pytest.fixture(scope="module")
def both(plane: Plane, aws: AwsWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    from sim.actors.controllers import JobTracking, ReplicaSetReplacer, UnschedulableTaint
    from sim.actors.karpenter import Karpenter
    from sim.actors.workloads import Workloads
    from sim.apiserver.core import KubeSim

    tmp = tmp_path_factory.mktemp("compare")
    with scene_cluster(plane, [SERVING, ML]) as c:
        # Given, on the real plane, two replicas behind a PDB and a trainer (exec) on a node Karpenter launched
        pods, node = replicas_and_trainer(c, SERVING, ML, "exec:true")
        claims_naming_their_nodes(c, 1)
        names = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]
        snapshot = _snapshot(c, node)
        instance = aws.instance_for_node(c.node(node))
        warning = spot_warning(instance)

        # When the same warning reaches gpuwarden on the real plane
        began = time.monotonic()
        real = answer(invoke(plane, aws, warning, tmp, save_as="compare.real"))
        claim_name = replacement_claim(c.node(node))
        real_claim, _ = claim_ready(c, claim_name)
        launch_seconds = max(1.0, time.monotonic() - began)
        real_node = c.node(node)
        on_real = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in c.pods(SERVING) + c.pods(ML)}
        real_left = [n for n in names if n in on_real]

        # and on the simulator given the same objects (its Karpenter launching as fast as the real one did)
        with KubeSim(clock_speed=1.0) as sim:
            _load(sim, snapshot)
            Workloads(sim, delay=0.0).install()
            ReplicaSetReplacer(sim)
            JobTracking(sim)
            UnschedulableTaint(sim)
            karpenter = Karpenter(sim, interruption_queue=False, launch_seconds=launch_seconds).start()
            try:
                sim_kube = tmp / "sim.kubeconfig"
                sim_kube.write_text(sim.kubeconfig_path.read_text())
                done = invoke_on(sim_kube, aws, warning, tmp)
            finally:
                karpenter.stop()
            sim_result = answer(done)
            sim_node = sim.get("Node", node) or {}
            sim_claim = sim.get("NodeClaim", claim_name) or {}
            on_sim = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in sim.list("Pod")}
            sim_left = [n for n in names if n in on_sim]
        (plane.artifacts / "compare.sim.stdout").write_text(json.dumps(sim_result, indent=1))
        claims = {"real": real_claim, "sim": sim_claim}
        (plane.artifacts / "compare.claims.json").write_text(json.dumps(claims, indent=1, default=str))
        yield Both(real, sim_result, real_node, sim_node, real_claim, sim_claim, real_left, sim_left, launch_seconds)


def invoke_on(kubeconfig: Path, aws: AwsWorld, event: dict[str, Any], tmp: Path) -> Any:
    """`gpuwarden invoke` as on the plane, but against the simulator's kubeconfig."""
    import subprocess

    from tests.e2e.world import GPUWARDEN

    path = tmp / "sim-event.json"
    path.write_text(json.dumps(event))
    return subprocess.run(
        [str(GPUWARDEN), "invoke", str(path)],
        capture_output=True,
        text=True,
        env=gpuwarden_env_for(kubeconfig, aws),
        timeout=300,
        check=False,
    )


def gpuwarden_env_for(kubeconfig: Path, aws: AwsWorld) -> dict[str, str]:
    import os

    from realplane.aws import REGION
    from tests.e2e.world import CLUSTER

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "DRY_RUN", "KUBECONFIG"))}
    return env | {
        "KUBECONFIG": str(kubeconfig),
        "AWS_ENDPOINT_URL": aws.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "GPUWARDEN_CLUSTER": CLUSTER,
    }


def test_gpuwarden_does_the_same_on_both(both: Both) -> None:
    assert (both.sim["outcome"], both.sim["node"]) == (both.real["outcome"], both.real["node"])
    assert _actions(both.sim) == _actions(both.real), (
        f"real: {json.dumps(sorted(_actions(both.real).items()), indent=1)}\n"
        f"sim:  {json.dumps(sorted(_actions(both.sim).items()), indent=1)}"
    )


def test_the_node_ends_with_the_same_marks(both: Both) -> None:
    assert _marks(both.sim_node) == _marks(both.real_node)


def test_the_same_pods_left_the_node(both: Both) -> None:
    assert both.sim_left == both.real_left == []


def test_the_replacement_nodeclaim_is_written_the_same(both: Both) -> None:
    assert _as_written(both.sim_claim) == _as_written(both.real_claim)
