"""A whole GPU cluster in one call."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sim.builders.nodes import gpu_node, nodeclaim_for, nodepool
from sim.builders.owners import daemonset, deployment, job, pdb, replicaset
from sim.builders.pods import daemonset_pod, inference_pod, training_pod

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim


@dataclass
class ClusterSummary:
    nodes: list[str] = field(default_factory=list)
    instance_ids: dict[str, str] = field(default_factory=dict)  # node -> instance id
    nodepool: str = ""
    nodeclaims: list[str] = field(default_factory=list)
    daemonset_pods: list[str] = field(default_factory=list)  # "ns/name"
    training_pods: list[str] = field(default_factory=list)
    inference_pods: list[str] = field(default_factory=list)
    pdb: str = ""  # "ns/name"


def gpu_cluster(
    sim: KubeSim,
    nodes: int = 4,
    nodepool_name: str = "gpu-training",
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2b"),
    inference_replicas: int = 3,
    pdb_min_available: int | str = 2,
    training_jobs: int | None = None,
) -> ClusterSummary:
    """Fill ``sim`` with a coherent GPU cluster and return what was made.

    NodePool + one NodeClaim/Node per node (spot, alternating zones); the NVIDIA device plugin
    DaemonSet with a pod on every node; one training Job pod per node on the first
    ``training_jobs`` nodes (default: all but the last); an inference Deployment/ReplicaSet with
    ``inference_replicas`` pods spread over the nodes behind a PDB (``minAvailable``).
    """
    out = ClusterSummary(nodepool=nodepool_name)
    sim.create(nodepool(nodepool_name, zones=zones))
    ds = sim.create(daemonset())
    node_objs = []
    for i in range(nodes):
        name = f"ip-10-0-{i + 1}-{10 + i}.us-west-2.compute.internal"
        instance_id = f"i-0{hashlib.sha256(name.encode()).hexdigest()[:16]}"
        node = sim.create(
            gpu_node(name, instance_id, zone=zones[i % len(zones)], nodepool=nodepool_name, ip=f"10.0.{i + 1}.{10 + i}")
        )
        node_objs.append(node)
        claim = sim.create(nodeclaim_for(node))
        out.nodes.append(name)
        out.instance_ids[name] = instance_id
        out.nodeclaims.append(claim["metadata"]["name"])
        dp = sim.create(daemonset_pod(node, owner=ds))
        out.daemonset_pods.append(f"kube-system/{dp['metadata']['name']}")
    for i, node in enumerate(node_objs[: nodes - 1 if training_jobs is None else training_jobs]):
        job_obj = sim.create(job(f"train-{i}", "ml"))
        tp = sim.create(training_pod(f"train-{i}-worker", node, owner=job_obj))
        out.training_pods.append(f"ml/{tp['metadata']['name']}")
    labels = {"app": "inference"}
    dep = sim.create(deployment("inference", "serving", labels, inference_replicas))
    rs = sim.create(replicaset("inference-6d4cf56db", "serving", labels, inference_replicas, dep))
    for i in range(inference_replicas):
        node = node_objs[i % len(node_objs)]
        suffix = hashlib.sha256(f"inference-{i}".encode()).hexdigest()[:5]
        ip = sim.create(inference_pod(f"inference-6d4cf56db-{suffix}", node, owner=rs))
        out.inference_pods.append(f"serving/{ip['metadata']['name']}")
    sim.create(pdb("inference", "serving", labels, min_available=pdb_min_available))
    out.pdb = "serving/inference"
    return out
