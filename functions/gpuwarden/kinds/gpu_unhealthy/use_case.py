"""gpu-unhealthy (docs/gpu-signals.md): a failing GPU, from a node condition (the GPU-health scan)
or an Alertmanager alert, through the one sequence as a Spot warning goes: cordon + taint at once,
checkpoint, replacement (left to Karpenter when it is already replacing the node), drain before
the deadline (when Karpenter's node repair / EKS auto repair would replace the node).

The breaker: never more than ``gpu_health.max_unhealthy_percent`` of a pool's nodes held for
gpu-unhealthy at once, counting those already held. Before the mark, the pool's count (from the
scan's own listing, or one LIST of the pool) refuses a node the pool has no room for: that node is
left untouched, reported (`held-back`, a Warning Event, the `GpuHealthHeldBack` metric) and taken by
a later scan. After the mark (RV-checked, `engine.writes`), the pool is listed again: a node whose
mark finds the pool over its count gives itself back at once. Write, then read: of two racers at
least one sees the other, so the pool is never over its count; both may give back (under the count
is safe) and the next scan takes them.

A scan's nodes are decided together: per pool, the oldest failures first, up to the room the pool
has; the rest are held back without a write. The scan is one LIST of the cluster's nodes (narrowed
by ``gpu_health.node_selector`` when set), kept where `accelerators.is_accelerator_node`; the
first cordon is the next request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.accelerators import is_accelerator_node
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.gpu_health import breaker_for, condition_notice, failing_condition, pool_of, pool_selector
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.views import NodeView
from gpuwarden.observability import Metric, put
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.disrupt import disrupt, ignored
from gpuwarden.services.engine.hooks import Disruption, KindHooks, Stop, no_guard
from gpuwarden.services.engine.result import Result, notice_result, summed_outcome

WHY = "gpu unhealthy: Karpenter node repair / EKS auto repair replace the node at the deadline"

#: How many unhealthy nodes of one scan are handled at once (different pools never wait on each other).
SCAN_WORKERS = 8


def _pool_nodes(deps: Deps, node: NodeView) -> list[NodeView]:
    selector = pool_selector(node)
    listed = deps.kube.list_nodes(selector) if selector else deps.kube.list_nodes()
    return [n for n in listed if pool_of(n) == pool_of(node)]


def breaker(d: Disruption) -> str | None:
    """Before the mark: the pool's count, unless this notice holds the node already (a resume)."""
    if d.node.annotations.get(ann.EVENT_ID) == d.notice.event_id:
        return None
    policy = d.deps.policy.gpu_health
    return breaker_for(d.node, _pool_nodes(d.deps, d.node), policy).refusal(d.node.name, policy.max_unhealthy_percent)


def recount(d: Disruption) -> str | None:
    """After the mark: the pool listed again, this node counted with its mark."""
    policy = d.deps.policy.gpu_health
    nodes = [n for n in _pool_nodes(d.deps, d.node) if n.name != d.node.name] + [d.node]
    return breaker_for(d.node, nodes, policy).refusal(d.node.name, policy.max_unhealthy_percent)


def _disabled(notice: Notice, deps: Deps) -> Result | None:
    if deps.policy.gpu_health.enabled:
        return None
    recorder = Recorder(deps, notice.event_id)
    return notice_result(notice, recorder, None, outcome="ignored", reason="gpu_health.enabled is false in the policy")


def handle_gpu_unhealthy(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """One gpu-unhealthy notice (an Alertmanager alert, or a scan's node)."""
    off = _disabled(notice, deps)
    if off is not None:
        return off
    return disrupt(notice, deps, hooks, drain_locally)


def held_back(stop: Stop) -> Result:
    """The kind's answer to a stop: a node the breaker refused is left untouched and reported (the
    reason, a Warning Event on the node, the metric); the other stops are ignored with the reason."""
    if not stop.refused or stop.node is None:
        return ignored(stop)
    stop.recorder.add(ActionType.HELD_BACK, stop.node, reason=stop.reason)
    stop.recorder.flush()
    return notice_result(stop.notice, stop.recorder, stop.node, outcome="ignored", reason=stop.reason)


# --------------------------------------------------------------------------- the scan


def scan(deps: Deps, hooks: KindHooks, drain_locally: bool, listed: Sequence[NodeView]) -> Result:
    """One GPU-health scan: of the scan's nodes (``listed``: `node_ops.scanned_nodes`), each failing
    condition a notice."""
    policy = deps.policy.gpu_health
    kind = Kind.GPU_UNHEALTHY.value
    if not policy.enabled:
        return Result(outcome="ignored", kind=kind, reason="gpu_health.enabled is false in the policy", results=[])
    # every listed node that has an accelerator, whatever its labels: GPU Feature Discovery's are optional
    nodes = [n for n in listed if is_accelerator_node(n)]
    now = deps.clock()
    failing = [(n, c) for n in nodes if (c := failing_condition(n)) is not None]
    if not deps.dry_run:
        put(Metric.GPU_HEALTH_SCANS)
        put(Metric.GPU_HEALTH_UNHEALTHY, float(len(failing)))
    notices = sorted(
        ((n, condition_notice(n, c, policy, now)) for n, c in failing),
        key=lambda pair: (pair[1].event_time, pair[0].name),  # the oldest failures first
    )
    admitted = _admit(notices, nodes, deps)
    # the scan decided each pool's room from its own listing: no second LIST before the cordon
    scanned = replace(hooks, admission=replace(hooks.admission, guard=no_guard))
    # new failures first (their cordon is the urgent write), then what an earlier scan started
    fresh = [p for p in notices if p[0].annotations.get(ann.EVENT_ID) != p[1].event_id]
    resumed = [p for p in notices if p[0].annotations.get(ann.EVENT_ID) == p[1].event_id]
    by_node: dict[str, Result] = {}
    for batch in (fresh, resumed):
        for (node, _), result in zip(
            batch,
            deps.each(
                lambda pair: _scan_one(pair[0], pair[1], deps, scanned, admitted, drain_locally), batch, SCAN_WORKERS
            ),
            strict=True,
        ):
            by_node[node.name] = result
    results = [by_node[node.name] for node, _ in notices]
    where = f"selector {policy.node_selector}" if policy.node_selector else "every node with an accelerator"
    reason = f"scanned {len(nodes)} GPU nodes ({where}): {len(failing)} with a failing GPU condition"
    if results:
        reason += ": " + "; ".join(f"{r.node}: {r.outcome}" for r in results[:20])
    return Result(outcome=summed_outcome(results), kind=kind, reason=reason, results=results)


def _admit(notices: Sequence[tuple[NodeView, Notice]], nodes: Sequence[NodeView], deps: Deps) -> dict[str, str | None]:
    """Per pool, in order, the nodes the pool has room for (None) and the others' refusals."""
    policy = deps.policy.gpu_health
    decided: dict[str, str | None] = {}
    taken: dict[str, list[str]] = {}
    for node, notice in notices:
        if node.annotations.get(ann.EVENT_ID) == notice.event_id:
            decided[node.name] = None  # held for this very failure already: a resume, counted already
            continue
        pool = pool_of(node)
        breaker = breaker_for(node, nodes, policy)
        breaker = replace(breaker, held=tuple(sorted({*breaker.held, *taken.get(pool, [])})))
        refusal = breaker.refusal(node.name, policy.max_unhealthy_percent)
        decided[node.name] = refusal
        if refusal is None:
            taken.setdefault(pool, []).append(node.name)
    return decided


def _scan_one(
    node: NodeView, notice: Notice, deps: Deps, hooks: KindHooks, admitted: dict[str, str | None], drain_locally: bool
) -> Result:
    from gpuwarden.domain.errors import GpuwardenError
    from gpuwarden.services.engine.failures import failed_notice

    refusal = admitted.get(node.name)
    try:
        if refusal is not None:
            return held_back(Stop(notice, Recorder(deps, notice.event_id), node, refusal, WHY, refused=True))
        if _already_draining(node, notice):
            reason = f"event {notice.event_id} is already being handled on {node.name}: the scan changes nothing"
            return notice_result(notice, Recorder(deps, notice.event_id), node, outcome="duplicate", reason=reason)
        return disrupt(notice, deps, hooks, drain_locally, node=node)
    except GpuwardenError as err:
        return failed_notice(notice, err)


def _already_draining(node: NodeView, notice: Notice) -> bool:
    """The mark for this failure is on the node and its drain has started: nothing left to start."""
    return node.annotations.get(ann.EVENT_ID) == notice.event_id and ann.DRAIN_STARTED in node.annotations
