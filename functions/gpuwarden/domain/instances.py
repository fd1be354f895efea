"""Whose an EC2 instance is, from what EC2 says about it (DescribeInstances): its private DNS
name (the node's name on EKS) and the cluster tags its launcher put on it (docs/architecture.md,
"Finding the node").

The tags that name a cluster, by who writes them:

- Karpenter (AWS provider v1): every instance it launches carries
  ``kubernetes.io/cluster/<cluster>: owned``, ``eks:eks-cluster-name: <cluster>``,
  ``karpenter.sh/nodepool`` and ``karpenter.k8s.aws/ec2nodeclass``
  (kubernetes-sigs/karpenter-provider-aws, pkg/cloudprovider/cloudprovider.go, `getTags`: the
  static tags merged over the EC2NodeClass's own; its validation refuses a user tag with these keys).
- EKS managed node groups: their Auto Scaling group propagates ``eks:cluster-name``,
  ``eks:nodegroup-name`` and ``kubernetes.io/cluster/<cluster>: owned`` to each instance.
- eksctl: ``alpha.eksctl.io/cluster-name`` and ``eksctl.cluster.k8s.io/v1alpha1/cluster-name``.
- ``aws:eks:cluster-name``: the AWS-reserved form EKS itself writes on resources it creates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
#: Tags whose value is the cluster's name (module docstring: who writes each).
CLUSTER_NAME_TAGS = (
    "eks:eks-cluster-name",
    "eks:cluster-name",
    "aws:eks:cluster-name",
    "alpha.eksctl.io/cluster-name",
    "eksctl.cluster.k8s.io/v1alpha1/cluster-name",
)


class Owner(StrEnum):
    OURS = "ours"
    OTHER = "another cluster's"
    UNKNOWN = "untagged"


@dataclass(frozen=True)
class InstanceIdentity:
    """What EC2 says about one instance."""

    instance_id: str
    private_dns_name: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def clusters(self) -> frozenset[str]:
        """The clusters the instance's tags name (empty: none of the known tags)."""
        named = {k[len(CLUSTER_TAG_PREFIX) :] for k in self.tags if k.startswith(CLUSTER_TAG_PREFIX)}
        named.update(self.tags[k] for k in CLUSTER_NAME_TAGS if self.tags.get(k))
        return frozenset(n for n in named if n)

    def owner(self, cluster: str) -> Owner:
        """Ours when a tag names ``cluster``; another cluster's when tags name only others;
        unknown when no tag names any (then only the cluster itself can say)."""
        clusters = self.clusters
        if not clusters:
            return Owner.UNKNOWN
        return Owner.OURS if cluster in clusters else Owner.OTHER
