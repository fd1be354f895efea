"""GPU health (docs/gpu-signals.md): which node conditions mean a failing GPU, the notice a failing
condition becomes, and the breaker that keeps a broken health signal from draining a NodePool.

Pure: no I/O, no clock (the caller passes ``now``), no kubernetes types.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.policy import GpuHealthPolicy
from gpuwarden.domain.views import NODEPOOL_LABEL, NodeCondition, NodeView

#: The EKS node monitoring agent's condition (reasons NvidiaXID<n>Error, NvidiaDoubleBitError, DCGMError…).
EKS_CONDITION = "AcceleratedHardwareReady"
#: NVIDIA NVSentinel's condition.
NVSENTINEL_CONDITION = "GPUHealthy"
CONDITIONS = (EKS_CONDITION, NVSENTINEL_CONDITION)

#: The XID codes the EKS node monitoring agent treats as fatal (`AcceleratedHardwareReady=False`,
#: reason NvidiaXID<n>Error): aws/eks-node-monitoring-agent monitors/nvidia/dcgm/dcgm_policies.go,
#: `WellKnownXidCodes`. Any other XID is a Warning there (a Kubernetes Event only): "watch".
FATAL_XIDS = (46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158)

SOURCE_SCAN = "gpuwarden.gpu-health-scan"
SOURCE_ALERT = "gpuwarden.alertmanager"
DETAIL_SCAN = "Node condition"
DETAIL_ALERT = "Alertmanager alert"

#: Grouping of nodes that have no Karpenter NodePool (managed node groups, self-managed).
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


def failing_condition(node: NodeView) -> NodeCondition | None:
    """The first GPU-health condition that is ``False`` (None: the node reports a healthy GPU, or nothing)."""
    for kind in CONDITIONS:
        condition = node.conditions.get(kind)
        if condition is not None and condition.status == "False":
            return condition
    return None


def reports_gpu_health(node: NodeView) -> bool:
    return any(kind in node.conditions for kind in CONDITIONS)


def condition_notice(node: NodeView, condition: NodeCondition, policy: GpuHealthPolicy, now: datetime) -> Notice:
    """A failing condition → its gpu-unhealthy notice. The identity includes the condition's
    lastTransitionTime: the same failure seen by every scan is one notice; a failure after a
    recovery (a new transition) is a new one."""
    since = condition.last_transition
    stamp = ann.rfc3339(since) if since is not None else "no-transition-time"
    return Notice(
        kind=Kind.GPU_UNHEALTHY,
        event_id=f"gpu-unhealthy/{node.name}/{condition.type}/{stamp}",
        node_name=node.name,
        instance_id=node.instance_id,
        deadline=(since or now) + policy.repair_after,
        event_time=since or now,
        source=SOURCE_SCAN,
        detail_type=DETAIL_SCAN,
        detail={"condition": condition.type, "reason": condition.reason, "message": condition.message[:512]},
    )


# --------------------------------------------------------------------------- the breaker


def pool_of(node: NodeView) -> str:
    """The group the breaker counts a node in: its NodePool, else its managed node group."""
    if node.nodepool:
        return f"nodepool/{node.nodepool}"
    group = node.labels.get(NODEGROUP_LABEL)
    return f"nodegroup/{group}" if group else "unpooled"


def pool_selector(node: NodeView) -> str | None:
    """The label selector that lists ``node``'s pool (None: the node has no pool label)."""
    if node.nodepool:
        return f"{NODEPOOL_LABEL}={node.nodepool}"
    group = node.labels.get(NODEGROUP_LABEL)
    return f"{NODEGROUP_LABEL}={group}" if group else None


def allowed_unhealthy(pool_size: int, percent: float) -> int:
    """How many of a pool's nodes may be held for gpu-unhealthy at once: ``percent`` of the pool,
    rounded up as Karpenter rounds its own node-repair threshold (a pool of one may repair its
    one node), 0 when ``percent`` is 0."""
    if percent <= 0 or pool_size <= 0:
        return 0
    return math.ceil(pool_size * percent / 100 - 1e-9)


def held_for_health(nodes: Iterable[NodeView]) -> list[str]:
    """Nodes gpuwarden holds for gpu-unhealthy (its mark says so)."""
    return sorted(n.name for n in nodes if n.annotations.get(ann.KIND) == Kind.GPU_UNHEALTHY.value)


@dataclass(frozen=True)
class Breaker:
    """A pool's count: its size, who is held, how many may be."""

    pool: str
    size: int
    held: tuple[str, ...]
    allowed: int

    def refusal(self, node: str, percent: float) -> str | None:
        """Why ``node`` may not be held too (None: it may). ``held`` includes ``node`` when it is
        marked already: the count is then checked with it."""
        count = len(set(self.held) | {node})
        if count <= self.allowed:
            return None
        shown = ", ".join(n for n in self.held if n != node)[:300] or "none"
        return (
            f"breaker: {self.pool} has {self.size} nodes and gpu_health.max_unhealthy_percent {percent:g} allows "
            f"{self.allowed} held for gpu-unhealthy at once; already held: {shown}. "
            "The node is left untouched; a later scan takes it once the pool recovers"
        )


def breaker_for(node: NodeView, nodes: Sequence[NodeView], policy: GpuHealthPolicy) -> Breaker:
    """The breaker's count for ``node``'s pool among ``nodes`` (one listing of the cluster's nodes)."""
    pool = pool_of(node)
    members = [n for n in nodes if pool_of(n) == pool]
    if all(n.name != node.name for n in members):
        members.append(node)
    held = tuple(held_for_health(members))
    return Breaker(pool, len(members), held, allowed_unhealthy(len(members), policy.max_unhealthy_percent))


def alert_identity(labels: dict[str, str]) -> str:
    """Alertmanager's fingerprint stands for its label set; this is its stand-in when a rendering
    carries none (the default text)."""
    text = "\x00".join(f"{k}={labels[k]}" for k in sorted(labels))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
