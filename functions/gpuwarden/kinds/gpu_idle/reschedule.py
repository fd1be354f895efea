"""GPU-idle's placement check: a node is reclaimed only when what its controllers would recreate
fits on the capacity that stays (`domain.placement`; docs/events.md, `gpu-idle`).

The requests stay small: the nodes are the guardrails' one LIST; pods are listed by node (as a
drain lists them), only for the nodes that could take a pod, one node at a time, and only until
every pod has a place. A refusal names each pod and its owner, and records the idle GPU-hours that
owner holds (the `IdleGpuHoursHeld` metric and an `IdleGpusHeld` Event on the node), so the
platform team sees who holds idle GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwarden.domain.actions import ActionType, Metric
from gpuwarden.domain.policy import section_of
from gpuwarden.domain.reschedule import ComesBack, candidates, free_gpus, must_place, would_come_back
from gpuwarden.domain.views import NodeView
from gpuwarden.domain.volumes import pod_zones
from gpuwarden.domain.wording import count
from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from gpuwarden.observability import put
from gpuwarden.services.engine.hooks import Disruption
from gpuwarden.services.engine.replace import volumes_of


def comes_back_refusal(d: Disruption, nodes: Sequence[NodeView]) -> str | None:
    """None when every recreated GPU pod of the node fits elsewhere; else the refusal."""
    movers = must_place(d.pods)
    if not movers:
        return None
    kube = d.deps.kube
    cache: dict[str, int] = {}

    def free(node: NodeView) -> int:
        if node.name not in cache:
            cache[node.name] = free_gpus(node, kube.list_pods_on_node(node.name))
        return cache[node.name]

    # a pod whose zonal volume holds it to a zone may only go there (docs/cluster.md, "Volumes")
    pins = pod_zones(movers, *volumes_of(kube, movers))
    stranded = would_come_back(movers, free, candidates(movers, nodes, d.node.name, pins), pins)
    if not stranded:
        return None
    _held(d, stranded)
    return "; ".join(s.reason() for s in stranded[:3]) + (
        f"; and {len(stranded) - 3} more" if len(stranded) > 3 else ""
    )


def _held(d: Disruption, stranded: Sequence[ComesBack]) -> None:
    """The idle GPU-hours each owner holds on this node, over the alarm's evaluation (at least)."""
    hours_per_gpu = section_of(d.deps.policy, GpuIdlePolicy).evaluation_minutes / 60.0
    for s in stranded:
        hours = round(s.gpus * hours_per_gpu, 3)
        d.recorder.add(
            ActionType.IDLE_GPUS_HELD,
            d.node,
            pod=s.pod,
            owner=s.owner,
            gpus=s.gpus,
            idle_gpu_hours=hours,
            reason=f"{s.owner} holds {count(s.gpus, 'idle GPU')} on {d.node.name} ({hours} GPU-hours so far at least)",
        )
        if not d.deps.dry_run:
            put(Metric.IDLE_GPU_HOURS_HELD, hours, "Count")
