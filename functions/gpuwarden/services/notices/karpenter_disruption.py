"""``karpenter-disruption`` (docs/cluster.md, "Beside Karpenter"; docs/events.md): the GPU-health scan
also finds the nodes Karpenter has begun to disrupt (drift, consolidation: it taints them
``karpenter.sh/disrupted`` and launches their replacements minutes before it evicts) and asks the
opted-in pods on them, and their gangs, to checkpoint at once, once per disruption (the request
is claimed on each pod under the disruption's id, so a later scan asks nothing twice). Nothing else:
no cordon, no eviction, no replacement; Karpenter drains and replaces its own node.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwarden.domain.notice import Kind
from gpuwarden.domain.views import NodeView
from gpuwarden.domain.wording import count
from gpuwarden.services.engine.checkpoint import Asking
from gpuwarden.services.engine.context import Deps, Recorder, worker_pool
from gpuwarden.services.engine.gangs import ask_gangs
from gpuwarden.services.engine.hooks import KindHooks
from gpuwarden.services.engine.node_ops import pods_on
from gpuwarden.services.engine.result import Result, finished, summed_outcome

KIND = Kind.KARPENTER_DISRUPTION


def disruption_id(node: NodeView) -> str:
    """One id per disruption: Karpenter disrupts a NodeClaim once (it is deleted after)."""
    return f"karpenter-disruption:{node.nodeclaim or node.name}"


def _ask(deps: Deps, node: NodeView) -> Result | None:
    pods = pods_on(deps.kube, node.name)
    recorder = Recorder(deps, disruption_id(node))
    with worker_pool() as pool:  # no deadline of its own: the pods' checkpoint timeouts bound the asks
        asked = ask_gangs(Asking(recorder, node, None, pool), pods)
        for delivery in asked.deliveries:
            delivery.result()
    recorder.flush()
    requested = [a for a in recorder.actions if a["type"] == "checkpoint-requested"]
    if not requested:
        return None  # asked by an earlier scan already, or nothing on it takes a checkpoint request
    reason = (
        f"Karpenter is disrupting {node.name} (tainted karpenter.sh/disrupted): asked {count(len(requested), 'pod')} "
        "to checkpoint now; Karpenter drains and replaces the node"
    )
    return Result(
        outcome=finished(deps.dry_run),
        kind=KIND.value,
        event_id=recorder.event_id,
        node=node.name,
        reason=reason,
        actions=recorder.actions,
    )


def scan(deps: Deps, hooks: KindHooks, drain_locally: bool, listed: Sequence[NodeView]) -> Result:
    """The kind's part of the scan: of the scan's one LIST of the nodes (``listed``, narrowed by
    ``gpu_health.node_selector`` where set), each node Karpenter is disrupting. Off with the scan
    itself (``gpu_health.enabled: false``)."""
    if not deps.policy.gpu_health.enabled:
        return Result(
            outcome="ignored", kind=KIND.value, reason="gpu_health.enabled is false in the policy", results=[]
        )
    disrupted = [n for n in listed if n.karpenter_disrupted]
    results = [r for r in (_ask(deps, n) for n in disrupted) if r is not None]
    reason = (
        f"{count(len(disrupted), 'node')} Karpenter is disrupting; {len(results)} with pods asked to checkpoint now"
    )
    return Result(outcome=summed_outcome(results), kind=KIND.value, reason=reason, results=results)
