"""The one mapping between Karpenter's AWS instance labels and EKS Auto Mode's (docs/cluster.md,
"EKS Auto Mode"). Pure.

Karpenter's AWS provider labels a node with ``karpenter.k8s.aws/instance-*``
(aws/karpenter-provider-aws pkg/apis/v1/labels.go); EKS Auto Mode, which is Karpenter run by AWS,
labels its nodes with the same concepts under ``eks.amazonaws.com/instance-*`` (AWS's "Create a Node
Pool for EKS Auto Mode", supported labels) and ``eks.amazonaws.com/compute-type: auto``. Every read
of an instance label goes through `instance_label`: the Karpenter key where the node carries it, else
its Auto Mode twin, and a replacement's requirement names the key the node itself carries.
"""

from __future__ import annotations

from collections.abc import Mapping

KARPENTER_PREFIX = "karpenter.k8s.aws/"
AUTO_MODE_PREFIX = "eks.amazonaws.com/"
#: EKS Auto Mode's nodes carry ``eks.amazonaws.com/compute-type: auto``
COMPUTE_TYPE_LABEL = "eks.amazonaws.com/compute-type"
AUTO_MODE = "auto"
#: an Auto Mode NodeClaim's (and NodePool template's) ``nodeClassRef``
AUTO_MODE_NODE_CLASS = ("eks.amazonaws.com", "NodeClass")
KARPENTER_NODE_CLASS = ("karpenter.k8s.aws", "EC2NodeClass")

#: the instance labels both list (the suffix after the prefix); Auto Mode has no
#: ``instance-accelerator-*`` (Neuron) nor ``capacity-reservation-*`` label on that list, so those
#: are read under Karpenter's key only
SHARED_SUFFIXES = (
    "instance-category",
    "instance-family",
    "instance-generation",
    "instance-size",
    "instance-cpu",
    "instance-cpu-manufacturer",
    "instance-memory",
    "instance-hypervisor",
    "instance-encryption-in-transit-supported",
    "instance-ebs-bandwidth",
    "instance-network-bandwidth",
    "instance-local-nvme",
    "instance-gpu-name",
    "instance-gpu-manufacturer",
    "instance-gpu-count",
    "instance-gpu-memory",
)
AUTO_MODE_KEYS: dict[str, str] = {KARPENTER_PREFIX + s: AUTO_MODE_PREFIX + s for s in SHARED_SUFFIXES}


def auto_mode_key(karpenter_key: str) -> str | None:
    """The Auto Mode twin of a ``karpenter.k8s.aws/*`` key (None: Auto Mode has none)."""
    return AUTO_MODE_KEYS.get(karpenter_key)


def instance_label(labels: Mapping[str, str], karpenter_key: str) -> tuple[str, str | None]:
    """(the key this node carries for ``karpenter_key``'s concept, its value): Karpenter's key where
    present, else Auto Mode's twin where present; (``karpenter_key``, None) when neither is."""
    if labels.get(karpenter_key):
        return karpenter_key, labels[karpenter_key]
    twin = auto_mode_key(karpenter_key)
    if twin and labels.get(twin):
        return twin, labels[twin]
    return karpenter_key, None


def is_auto_mode(labels: Mapping[str, str]) -> bool:
    """A node (or NodeClaim) of EKS Auto Mode."""
    return labels.get(COMPUTE_TYPE_LABEL) == AUTO_MODE


def is_auto_mode_class(node_class_ref: Mapping[str, object] | None) -> bool:
    """A ``nodeClassRef`` naming Auto Mode's ``eks.amazonaws.com`` ``NodeClass``."""
    ref = node_class_ref or {}
    return (str(ref.get("group", "")), str(ref.get("kind", ""))) == AUTO_MODE_NODE_CLASS
