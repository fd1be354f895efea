"""Spot interruption warnings, rebalance recommendations, instance state changes (docs/events.md)."""

from __future__ import annotations

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.decide import plan_interruption
from gpuwarden.domain.drain import DrainContext, decide_round
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.schedule import Allowance, voluntary_allowance
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.context import Deps, Recorder
from gpuwarden.services.kinds import hooks_for
from gpuwarden.services.node_ops import find_node, not_ours, window_allowance
from gpuwarden.services.pipeline import Disruption, Steps, run, take
from gpuwarden.services.result import Result, notice_result
from gpuwarden.services.writes import Patch, annotate, update_node

_LOST_EVENTS_KEPT = 8


def _allowance(notice: Notice, deps: Deps, node: NodeView) -> Allowance:
    """Only a voluntary kind asks the windows (spot interruptions and state changes never wait)."""
    windows, now = deps.policy.windows, deps.window_clock()
    if notice.kind.voluntary:
        return window_allowance(deps.kube, windows, now, node)
    return voluntary_allowance(windows, now, node.nodepool, in_progress=0)


def _pods_on(deps: Deps, node: NodeView) -> list[PodView]:
    return [p for p in deps.kube.list_pods_on_node(node.name) if p.node_name == node.name]


def handle_interruption(notice: Notice, deps: Deps, *, drain_locally: bool = True) -> Result:
    node = find_node(deps.kube, deps.cloud, notice.instance_id, notice.node_name)
    if node is None:
        recorder = Recorder(deps, notice.event_id)
        return notice_result(notice, recorder, None, outcome="ignored", reason=not_ours(notice, deps.policy.cluster))
    if notice.kind is Kind.INSTANCE_STOPPING:
        return _record_loss(notice, Recorder(deps, notice.event_id), node, _pods_on(deps, node))
    d = Disruption(notice, deps, node, hooks_for(notice.kind), drain_locally)
    # An involuntary notice cordons before anything else is read: its plan needs no pods.
    pods = d.pods if notice.kind.voluntary else []
    plan = plan_interruption(notice.kind, node, pods, deps.policy, _allowance(notice, deps, node))
    taken = take(d, plan.reason)
    if taken.held_by is not None:
        return notice_result(notice, d.recorder, node, outcome="ignored", reason=taken.held_reason())
    if plan.refused:
        d.recorder.add(ActionType.REFUSED, d.node, reason=plan.refused)
    state = run(d, Steps(checkpoint=plan.checkpoint, replace=plan.replace, drain=plan.drain))
    outcome = "dry-run" if deps.dry_run else "handled" if taken.changed else "duplicate"
    reason = plan.reason if not plan.refused else f"{plan.reason}; drain refused: {plan.refused}"
    if outcome == "duplicate":
        reason = f"event {notice.event_id} was already applied to {d.node.name}; resumed what was left"
    return notice_result(
        notice,
        d.recorder,
        d.node,
        outcome=outcome,
        reason=reason,
        drain=state.model_dump(mode="json") if state else None,
        seconds_left=state.seconds_left if state else None,
        plan=_plan(notice, deps, d.pods) if deps.dry_run else None,
    )


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

    def decide(current: NodeView) -> Patch | None:
        # an instance sends several state changes (stopping, stopped, terminated): remember the last few
        seen = [e for e in current.annotations.get(ann.LOST_EVENT, "").split(",") if e]
        if event_id in seen:
            return None
        return annotate({ann.LOST_EVENT: ",".join([*seen[-(_LOST_EVENTS_KEPT - 1) :], event_id])})

    reported = update_node(recorder.deps.kube, node, decide)
    return reported.written or reported.obj is None


def _record_loss(notice: Notice, recorder: Recorder, node: NodeView, pods: list[PodView]) -> Result:
    state = notice.detail.get("state", "stopping")
    if not _first_report(recorder, node, notice.event_id):
        reason = f"instance {state}: event {notice.event_id} was already recorded on {node.name}"
        return notice_result(notice, recorder, node, outcome="duplicate", reason=reason)
    ctx = DrainContext(event_id=notice.event_id, involuntary=True, deadline=notice.deadline, now=recorder.deps.clock())
    left = [s.pod for s in decide_round(pods, ctx) if s.step != "skip"]
    drained = not left  # the pods say it, not an annotation an earlier drain may have left
    if drained:
        recorder.add(ActionType.INSTANCE_LOST, reason=f"instance {state} after its node was drained")
        reason = f"instance {state}; node {node.name} had been drained"
    else:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        recorder.add(ActionType.NODE_LOST_UNDRAINED, node, reason=f"instance {state} with pods still on it: {shown}")
        recorder.flush()
        reason = f"instance {state} before node {node.name} was drained ({len(left)} pods lost)"
    outcome = "dry-run" if recorder.deps.dry_run else "handled"
    return notice_result(notice, recorder, node, outcome=outcome, reason=reason)
