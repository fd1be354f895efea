"""Where the pods of a node gpu-idle would reclaim go next (docs/events.md, `gpu-idle`).

Karpenter's consolidation never disrupts a node before it has simulated scheduling its pods on
the capacity that stays (sigs.k8s.io/karpenter, pkg/controllers/disruption: `SimulateScheduling`,
over the pods `pod.IsReschedulable` keeps: active, or a terminating StatefulSet pod; not a
DaemonSet's; not a mirror pod). gpuwarden's GPU-idle does the same for the pods that matter to
a GPU node, before it takes one:

- a pod its controller recreates (any controller owner but a DaemonSet or the Node: ReplicaSet,
  StatefulSet, an unfinished Job, an operator's own kind) that asks for GPUs must fit, with the
  others, on a schedulable node that stays: not cordoned, not being disrupted, whose NoSchedule /
  NoExecute taints it tolerates (Kubernetes' toleration rules), whose labels match its
  nodeSelector and one of its required node-affinity terms (In, NotIn, Exists, DoesNotExist,
  Gt, Lt), with enough free GPUs (capacity minus what its pods ask);
- otherwise the node is refused: the pod "would come straight back on new capacity", and an
  idle GPU would be bought again;
- pods nothing recreates (bare pods, finished pods) and pods that ask no GPU do not block;
- a pod whose zonal volume holds it to a zone (``pins``, `volumes.pod_zones`) may only go to a
  node in that zone (docs/cluster.md, "Volumes").

Pure: the caller lists the nodes and the pods of the nodes it asks about.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpuwarden.domain.predicates import requirement_matches, tolerates
from gpuwarden.domain.views import GPU_RESOURCE, NodeView, PodView
from gpuwarden.domain.wording import count

#: Controller kinds that do not recreate a pod elsewhere (Karpenter's IsOwnedByDaemonSet / ByNode).
_NOT_RECREATED = frozenset({"DaemonSet", "Node"})
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def recreated(pod: PodView) -> bool:
    """Its controller makes it again once evicted: a controller owner that is not a DaemonSet or
    the node, and the pod is still active (a finished pod, or a finished Job's, is not remade)."""
    if pod.owner_kind is None or pod.owner_kind in _NOT_RECREATED or pod.is_mirror:
        return False
    return not pod.finished


def may_run_on(pod: PodView, node: NodeView, pins: Mapping[str, Sequence[str]] | None = None) -> bool:
    """The node's taints, labels, cordon and zone (``pins``: pod key → the zones its volumes allow)
    allow the pod (resources aside)."""
    if node.unschedulable:
        return False
    zones = (pins or {}).get(pod.key)
    if zones is not None and node.zone not in zones:
        return False
    if any(t.effect in _BLOCKING_EFFECTS and not tolerates(pod.tolerations, t) for t in node.taints):
        return False
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    terms = pod.required_node_affinity
    return not terms or any(all(requirement_matches(r, node.labels) for r in term) for term in terms)


@dataclass(frozen=True)
class ComesBack:
    """A pod that would be recreated with nowhere to go but new capacity."""

    pod: str
    owner: str
    gpus: int

    def reason(self) -> str:
        return (
            f"{self.pod} ({self.owner}) would come straight back on new capacity: no schedulable node that "
            f"stays has {count(self.gpus, 'free GPU')} it may use"
        )


def must_place(pods: Sequence[PodView]) -> list[PodView]:
    """The pods of the node that need a place elsewhere, most GPUs first (first-fit decreasing)."""
    movers = [p for p in pods if recreated(p) and p.gpu_request > 0 and not p.terminating]
    return sorted(movers, key=lambda p: (-p.gpu_request, p.key))


def candidates(
    movers: Sequence[PodView], nodes: Sequence[NodeView], leaving: str, pins: Mapping[str, Sequence[str]] | None = None
) -> list[NodeView]:
    """The nodes that stay and could take at least one mover (before their free GPUs are known)."""
    return [
        n for n in nodes if n.name != leaving and n.gpu_capacity > 0 and any(may_run_on(p, n, pins) for p in movers)
    ]


def free_gpus(node: NodeView, pods_on_node: Sequence[PodView]) -> int:
    used = sum(p.gpu_request for p in pods_on_node if not p.finished and p.node_name == node.name)
    # what kube-scheduler counts: allocatable (capacity may be more, or, on a node whose kubelet
    # reports it otherwise, less: docs/realplane.md, "Findings")
    return node.allocatable.get(GPU_RESOURCE, node.gpu_capacity) - used


def would_come_back(
    movers: Sequence[PodView],
    free: Callable[[NodeView], int],
    nodes: Sequence[NodeView],
    pins: Mapping[str, Sequence[str]] | None = None,
) -> list[ComesBack]:
    """Place each mover (most GPUs first) on the first node that takes it and has the GPUs left
    (``free``: a node's free GPUs, asked only of a node the pod may run on); the movers left over
    would come back on new capacity."""
    left: dict[str, int] = {}
    stranded: list[ComesBack] = []
    for pod in movers:
        home = None
        for n in nodes:
            if not may_run_on(pod, n, pins):
                continue
            if n.name not in left:
                left[n.name] = free(n)
            if left[n.name] >= pod.gpu_request:
                home = n
                break
        if home is None:
            stranded.append(ComesBack(pod.key, f"{pod.owner_kind}/{pod.owner_name}", pod.gpu_request))
            continue
        left[home.name] -= pod.gpu_request
    return stranded
