"""Builders for realistic objects: EKS GPU nodes under Karpenter, their pods and owners
(`nodes`, `owners`, `pods`, `cluster`; what they share in `base`).

Every builder returns a plain dict ready for ``KubeSim.create``. Owner references need the
owner's uid: pass the stored owner (what ``sim.create`` returned) as ``owner``; without one a
stable uid derived from the owner's name is used.
"""

from __future__ import annotations

from sim.builders.auto_mode import auto_mode_gpu_node, auto_mode_nodepool
from sim.builders.base import CREATED, GPU, GPU_TAINT, GPU_TOLERATION, Obj, ip_for, owner_ref, region_of, uid_for
from sim.builders.cluster import ClusterSummary, gpu_cluster
from sim.builders.nodes import gpu_node, nodeclaim_for, nodepool, trainium_node
from sim.builders.owners import daemonset, deployment, job, pdb, replicaset, statefulset, workload
from sim.builders.pods import daemonset_pod, inference_pod, mirror_pod, pod, running_status, training_pod

__all__ = [
    "CREATED",
    "GPU",
    "GPU_TAINT",
    "GPU_TOLERATION",
    "ClusterSummary",
    "Obj",
    "auto_mode_gpu_node",
    "auto_mode_nodepool",
    "daemonset",
    "daemonset_pod",
    "deployment",
    "gpu_cluster",
    "gpu_node",
    "inference_pod",
    "ip_for",
    "job",
    "mirror_pod",
    "nodeclaim_for",
    "nodepool",
    "owner_ref",
    "pdb",
    "pod",
    "region_of",
    "replicaset",
    "running_status",
    "statefulset",
    "training_pod",
    "trainium_node",
    "uid_for",
    "workload",
]
