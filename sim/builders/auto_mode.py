"""EKS Auto Mode: a GPU node as AWS's managed Karpenter leaves it, and an Auto Mode NodePool.

The labels are AWS's list for Auto Mode ("Create a Node Pool for EKS Auto Mode", supported labels):
``eks.amazonaws.com/compute-type: auto`` and ``eks.amazonaws.com/instance-*`` where self-managed
Karpenter writes ``karpenter.k8s.aws/instance-*``; the NodePool's and NodeClaims' ``nodeClassRef``
is ``eks.amazonaws.com`` ``NodeClass``. AWS names an Auto Mode node after its instance id.
"""

from __future__ import annotations

from sim.builders.base import Obj
from sim.builders.nodes import AUTO_MODE_LABEL, AUTO_MODE_NODE_CLASS, gpu_node, nodepool

#: p5.48xlarge as Auto Mode labels it
P5_LABELS = {
    "eks.amazonaws.com/instance-category": "p",
    "eks.amazonaws.com/instance-family": "p5",
    "eks.amazonaws.com/instance-generation": "5",
    "eks.amazonaws.com/instance-size": "48xlarge",
    "eks.amazonaws.com/instance-gpu-manufacturer": "nvidia",
    "eks.amazonaws.com/instance-gpu-name": "h100",
    "eks.amazonaws.com/instance-gpu-count": "8",
    "eks.amazonaws.com/instance-gpu-memory": "81920",
}


def auto_mode_gpu_node(
    instance_id: str,
    zone: str = "us-west-2a",
    nodepool: str = "gpu-auto",
    capacity_type: str = "spot",
    name: str | None = None,
) -> Obj:
    """A Ready p5.48xlarge of EKS Auto Mode (8 H100)."""
    node = gpu_node(name or instance_id, instance_id, zone, "p5.48xlarge", nodepool, capacity_type, gpus=8)
    labels = node["metadata"]["labels"]
    labels.pop("karpenter.k8s.aws/ec2nodeclass", None)
    labels |= {AUTO_MODE_LABEL: "auto", **P5_LABELS}
    return node


def auto_mode_nodepool(name: str = "gpu-auto", budgets: list[Obj] | None = None) -> Obj:
    """A NodePool of Auto Mode: its NodeClass, and Auto Mode's default expiry (336 h)."""
    pool = nodepool(name, instance_types=("p5.48xlarge",), budgets=budgets)
    spec = pool["spec"]["template"]["spec"]
    spec["nodeClassRef"] = dict(AUTO_MODE_NODE_CLASS)
    spec["expireAfter"] = "336h"
    return pool
