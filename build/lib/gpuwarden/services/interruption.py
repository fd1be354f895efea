"""Spot interruption warnings, rebalance recommendations, instance state changes (CONTRACT §1)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.decide import NodePlan, plan_interruption
from gpuwarden.domain.drain import DrainContext, decide_round
from gpuwarden.domain.errors import Conflict, KubeError
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.domain.windows import Allowance, voluntary_allowance
from gpuwarden.services.checkpoint import request_checkpoints
from gpuwarden.services.context import Deps, Recorder
from gpuwarden.services.drain import DrainState, drain_step
from gpuwarden.services.node_ops import find_node, mark_node, window_allowance
from gpuwarden.services.replace import ensure_replacement
from gpuwarden.services.result import Result, notice_result

_POOL_SIZE = 16
_LOST_EVENTS_KEPT = 8


def _allowance(notice: Notice, deps: Deps, node: NodeView) -> Allowance:
    """Only a voluntary kind asks the windows (spot interruptions and state changes never wait)."""
    windows, now = deps.policy.windows, deps.window_clock()
    if notice.kind.voluntary:
        return window_allowance(deps.kube, windows, now, node)
    return voluntary_allowance(windows, now, node.nodepool, in_progress=0)


def _pods_on(deps: Deps, node: NodeView) -> list[PodView]:
    return [p for p in deps.kube.list_pods_on_node(node.name) if p.node_name == node.name]


def not_ours(notice: Notice, cluster: str) -> str:
    return f"{notice.target} is not a node of cluster {cluster}"


def handle_interruption(notice: Notice, deps: Deps, *, drain_locally: bool = True) -> Result:
    recorder = Recorder(deps, notice.event_id)
    node = find_node(deps.kube, deps.cloud, notice.instance_id, notice.node_name)
    if node is None:
        return notice_result(notice, recorder, None, outcome="ignored", reason=not_ours(notice, deps.policy.cluster))
    if notice.kind is Kind.INSTANCE_STOPPING:
        return _record_loss(notice, recorder, node, _pods_on(deps, node))
    # An involuntary notice cordons before anything else is read: its plan needs no pods.
    pods = _pods_on(deps, node) if notice.kind.voluntary else None
    allowance = _allowance(notice, deps, node)
    plan = plan_interruption(notice.kind, node, pods or [], deps.policy, allowance)
    mark = mark_node(deps.kube, node, notice)
    if mark.held_by is not None:
        reason = f"node {node.name} is already being handled for {mark.held_by}"
        return notice_result(notice, recorder, node, outcome="ignored", reason=reason)
    node = mark.node
    if mark.changed:
        recorder.add("cordon", node, taint=f"{ann.TAINT_KEY}={notice.kind.value}:NoSchedule", reason=plan.reason)
    if pods is None:
        pods = _pods_on(deps, node)
    if plan.refused:
        recorder.add("refused", node, reason=plan.refused)
    state = _run(notice, recorder, node, pods, plan, drain_locally)
    outcome = "dry-run" if deps.dry_run else "handled" if mark.changed else "duplicate"
    reason = plan.reason if not plan.refused else f"{plan.reason}; drain refused: {plan.refused}"
    if outcome == "duplicate":
        reason = f"event {notice.event_id} was already applied to {node.name}; resumed what was left"
    return notice_result(
        notice,
        recorder,
        node,
        outcome=outcome,
        reason=reason,
        drain=state.model_dump(mode="json") if state else None,
        seconds_left=state.seconds_left if state else None,
        plan=_plan(notice, deps, pods) if deps.dry_run else None,
    )


def _run(
    notice: Notice,
    recorder: Recorder,
    node: NodeView,
    pods: list[PodView],
    plan: NodePlan,
    drain_locally: bool,
) -> DrainState | None:
    deps = recorder.deps
    started = deps.clock()
    with ThreadPoolExecutor(max_workers=_POOL_SIZE) as pool:
        deliveries: list[Future[None]] = []
        if plan.checkpoint:
            deliveries = request_checkpoints(recorder, node, pods, notice.deadline, pool)
        if plan.replace:
            deliveries.append(pool.submit(ensure_replacement, recorder, node, notice, pods))
        state = None
        if plan.drain and not deps.dry_run:
            if deps.start_drain is not None and not drain_locally:
                # Deployed: the drain workflow starts now and runs beside the deliveries still
                # under way (an exec or POST checkpoint waits for its answer in this invocation).
                state = DrainState(
                    node=node.name,
                    event_id=notice.event_id,
                    kind=notice.kind,
                    deadline=notice.deadline,
                    started_at=started,
                )
                deps.start_drain(state.model_dump(mode="json"))
            else:
                state = _first_rounds(recorder, notice, node, started, deliveries, pool)
        wait(deliveries)
        for future in deliveries:
            future.result()
        recorder.flush()
    if state is None or state.done or (deps.start_drain is not None and not drain_locally):
        return state
    return drain_to_end(recorder, state)


def _first_rounds(
    recorder: Recorder,
    notice: Notice,
    node: NodeView,
    started: datetime,
    deliveries: list[Future[None]],
    pool: ThreadPoolExecutor,
) -> DrainState:
    """Drain rounds while the checkpoint deliveries (exec, POST) are still under way."""
    state = DrainState(
        node=node.name,
        event_id=notice.event_id,
        kind=notice.kind,
        deadline=notice.deadline,
        started_at=started,
    )
    state = drain_step(recorder, state, pool)
    while not state.done and not all(f.done() for f in deliveries):
        # only the deliveries still running: a finished one would end every wait at once (a hot loop)
        pending = [f for f in deliveries if not f.done()]
        wait(pending, timeout=state.wait_seconds, return_when="FIRST_COMPLETED")
        state = drain_step(recorder, state, pool)
    return state


def drain_to_end(recorder: Recorder, state: DrainState) -> DrainState:
    """The local driver of `drain_step` (deployed, the Step Functions loop does this)."""
    while not state.done:
        recorder.deps.sleep(state.wait_seconds)
        state = drain_step(recorder, state)
    return state


def _plan(notice: Notice, deps: Deps, pods: list[PodView]) -> list[dict[str, object]]:
    ctx = DrainContext(
        event_id=notice.event_id,
        involuntary=not notice.kind.voluntary,
        deadline=notice.deadline,
        now=deps.clock(),
        default_checkpoint_timeout=deps.policy.checkpoint.default_timeout_seconds,
        allow_exec=deps.policy.checkpoint.allow_exec,
    )
    return [step.as_dict() for step in decide_round(pods, ctx)]


def _first_report(recorder: Recorder, node: NodeView, event_id: str) -> bool:
    """Mark the node with the state-change event (RV-checked): False when it was reported already."""
    kube = recorder.deps.kube
    for _ in range(5):
        # an instance sends several state changes (stopping, stopped, terminated): remember the last few
        seen = [e for e in node.annotations.get(ann.LOST_EVENT, "").split(",") if e]
        if event_id in seen:
            return False
        patch = {"metadata": {"annotations": {ann.LOST_EVENT: ",".join([*seen[-(_LOST_EVENTS_KEPT - 1) :], event_id])}}}
        try:
            kube.patch_node(node.name, patch, node.resource_version)
            return True
        except Conflict:
            fresh = kube.get_node(node.name)
            if fresh is None:
                return True
            node = fresh
    raise KubeError(f"node {node.name}: write conflicts in a row while recording its loss", status=409)


def _record_loss(notice: Notice, recorder: Recorder, node: NodeView, pods: list[PodView]) -> Result:
    state = notice.detail.get("state", "stopping")
    if not _first_report(recorder, node, notice.event_id):
        reason = f"instance {state}: event {notice.event_id} was already recorded on {node.name}"
        return notice_result(notice, recorder, node, outcome="duplicate", reason=reason)
    ctx = DrainContext(event_id=notice.event_id, involuntary=True, deadline=notice.deadline, now=recorder.deps.clock())
    left = [s.pod for s in decide_round(pods, ctx) if s.step != "skip"]
    drained = not left  # the pods say it, not an annotation an earlier drain may have left
    if drained:
        recorder.add("instance-lost", reason=f"instance {state} after its node was drained")
        reason = f"instance {state}; node {node.name} had been drained"
    else:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        recorder.add("node-lost-undrained", node, reason=f"instance {state} with pods still on it: {shown}")
        recorder.flush()
        reason = f"instance {state} before node {node.name} was drained ({len(left)} pods lost)"
    outcome = "dry-run" if recorder.deps.dry_run else "handled"
    return notice_result(notice, recorder, node, outcome=outcome, reason=reason)
