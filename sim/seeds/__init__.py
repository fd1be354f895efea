"""The seed articles' manifests, in one place (docs/protections.md, "The seeds' manifests").

``nodepools.yaml`` and ``workloads.yaml`` hold them as a user would ``kubectl apply`` them, every
value marked as quoted from the seed text (SEED) or chosen here (ASSUMPTION). This module loads
them for the tests, the sandbox and the real-plane scenes:

- `nodepools` / `workloads`: the documents as written;
- `on_plane`: a NodePool on another node class and instance types (the real plane's KWOK ones);
- `seed_cluster`: the simulator filled with them, as the controllers and Karpenter would have left
  it: nodes and NodeClaims for the training and inference pools, the Indexed Job's four ranks one
  per node, ``long-training-job`` on a node of its own, Triton's replicas behind their PDB.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from sim.builders.base import Obj, owner_ref
from sim.builders.nodes import gpu_node, nodeclaim_for
from sim.builders.owners import daemonset
from sim.builders.pods import daemonset_pod, running_status

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim

HERE = Path(__file__).parent
TRAINING_POOL = "gpu-training"
INFERENCE_POOL = "gpu-inference"
TRAINING_JOB = "distributed-training"
LONG_TRAINING_JOB = "long-training-job"
TRITON = "triton"


@cache
def _documents(file: str) -> tuple[Obj, ...]:
    return tuple(d for d in yaml.safe_load_all((HERE / file).read_text()) if d)


def nodepools() -> dict[str, Obj]:
    """The seeds' NodePools by name (fresh copies)."""
    return {d["metadata"]["name"]: copy.deepcopy(d) for d in _documents("nodepools.yaml")}


def workloads() -> list[Obj]:
    """The seeds' namespaces, Job, Deployment, PDB and Pod, in apply order (fresh copies)."""
    return [copy.deepcopy(d) for d in _documents("workloads.yaml")]


def workload(kind: str, name: str) -> Obj:
    return next(d for d in workloads() if d["kind"] == kind and d["metadata"]["name"] == name)


def on_plane(pool: Obj, node_class_ref: Obj, instance_types: list[str]) -> Obj:
    """``pool`` on another node class, its instance types narrowed to ``instance_types`` (what a
    KWOK provider offers), everything else as written."""
    out = copy.deepcopy(pool)
    spec = out["spec"]["template"]["spec"]
    spec["nodeClassRef"] = dict(node_class_ref)
    spec["requirements"] = [
        {**req, "values": list(instance_types)} if req["key"] == "node.kubernetes.io/instance-type" else req
        for req in spec["requirements"]
        if req["key"] != "topology.kubernetes.io/zone"
    ]
    return out


def _pod_from_template(name: str, namespace: str, template: Obj, node: Obj, owner: Obj | None) -> Obj:
    """A running pod made from ``template`` on ``node``, as the kubelet reports it."""
    meta = template.get("metadata", {})
    spec = copy.deepcopy(template["spec"])
    spec.pop("nodeSelector", None)  # bound already
    spec["nodeName"] = node["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(meta.get("labels", {})),
            "annotations": dict(meta.get("annotations", {})),
            **({"ownerReferences": [owner_ref(owner)]} if owner is not None else {}),
        },
        "spec": spec,
        "status": running_status(node, name, spec["containers"]),
    }


def _suffix(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:5]


@dataclass
class SeedCluster:
    """What `seed_cluster` made: node names by pool, pods by workload ("ns/name")."""

    nodes: dict[str, list[str]] = field(default_factory=dict)
    instance_ids: dict[str, str] = field(default_factory=dict)
    pods: dict[str, list[str]] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)  # pod key -> node

    def training_ranks(self) -> list[str]:
        return self.pods[TRAINING_JOB]


def _nodes(sim: KubeSim, out: SeedCluster, pool: Obj, ds: Obj, gpus: int, specs: list[Obj]) -> list[Obj]:
    name = pool["metadata"]["name"]
    reqs = {r["key"]: r["values"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    itype = reqs["node.kubernetes.io/instance-type"][0]
    capacity = reqs.get("karpenter.sh/capacity-type", ["on-demand"])[0]
    zones = reqs.get("topology.kubernetes.io/zone", ["us-west-2a"])
    made = []
    for i, more in enumerate(specs):
        third = 1 + sorted(nodepools()).index(name)
        node_name = f"ip-10-{third}-{i + 1}-{10 + i}.us-west-2.compute.internal"
        instance = f"i-0{hashlib.sha256(node_name.encode()).hexdigest()[:16]}"
        node = sim.create(
            gpu_node(
                node_name, instance, zones[i % len(zones)], itype, name, capacity, gpus, f"10.{third}.{i + 1}.{10 + i}"
            )
        )
        claim = nodeclaim_for(node)
        claim["spec"]["expireAfter"] = pool["spec"]["template"]["spec"].get("expireAfter", "720h")
        claim["spec"] |= more
        sim.create(claim)
        sim.create(daemonset_pod(node, owner=ds))
        out.nodes.setdefault(name, []).append(node_name)
        out.instance_ids[node_name] = instance
        made.append(node)
    return made


def _place(sim: KubeSim, out: SeedCluster, workload_name: str, pod: Obj) -> None:
    stored = sim.create(pod)
    key = f"{stored['metadata']['namespace']}/{stored['metadata']['name']}"
    out.pods.setdefault(workload_name, []).append(key)
    out.node_of[key] = stored["spec"]["nodeName"]


def seed_cluster(
    sim: KubeSim, *, pools: tuple[str, ...] | None = None, claims: Mapping[str, Obj] | None = None
) -> SeedCluster:
    """Every seed NodePool (or only ``pools``), five gpu-training nodes (the Job's four ranks, then
    ``long-training-job``), three gpu-inference nodes (one Triton replica each) behind Triton's PDB,
    the NVIDIA device plugin on every node. NodeClaims carry their pool's ``expireAfter`` and are
    made now; ``claims`` (workload name -> NodeClaim spec fields) changes the claims of the nodes
    that workload runs on (a NodeClaim's spec is immutable once made, as Karpenter's CRD says)."""
    more = dict(claims or {})
    out = SeedCluster()
    for name, pool in nodepools().items():
        if pools is None or name in pools:
            sim.create(pool)
    ds = sim.create(daemonset())
    for doc in workloads():
        if doc["kind"] in ("Namespace", "PodDisruptionBudget"):
            sim.create(doc)
    specs = [dict(more.get(TRAINING_JOB, {}))] * 4 + [dict(more.get(LONG_TRAINING_JOB, {}))]
    training = _nodes(sim, out, nodepools()[TRAINING_POOL], ds, 8, specs)
    job = sim.create(workload("Job", TRAINING_JOB))
    template = job["spec"]["template"]
    for index, node in enumerate(training[:4]):
        pod = _pod_from_template(f"{TRAINING_JOB}-{index}-{_suffix(str(index))}", "ml", template, node, job)
        pod["metadata"]["labels"] |= {
            "batch.kubernetes.io/job-name": TRAINING_JOB,
            "job-name": TRAINING_JOB,
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(index)
        _place(sim, out, TRAINING_JOB, pod)
    bare = workload("Pod", LONG_TRAINING_JOB)
    _place(sim, out, LONG_TRAINING_JOB, _pod_from_template(LONG_TRAINING_JOB, "ml", bare, training[4], None))
    inference = _nodes(sim, out, nodepools()[INFERENCE_POOL], ds, 1, [dict(more.get(TRITON, {}))] * 3)
    deployment = sim.create(workload("Deployment", TRITON))
    rs_name = f"{TRITON}-{_suffix(TRITON)}7d"
    rs = copy.deepcopy(deployment)
    rs["kind"] = "ReplicaSet"
    rs["metadata"] = {"name": rs_name, "namespace": "inference", "labels": {"app": TRITON}}
    rs["metadata"]["ownerReferences"] = [owner_ref(deployment)]
    rs = sim.create(rs)
    for i, node in enumerate(inference):
        pod = _pod_from_template(f"{rs_name}-{_suffix(str(i))}", "inference", rs["spec"]["template"], node, rs)
        _place(sim, out, TRITON, pod)
    return out
