"""An instance stopping or terminated (`instance-stopping`, docs/events.md): nothing is done to the
node any more; the loss is recorded once per state change, loudly when pods were still on it."""

from __future__ import annotations

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.drain import DrainContext, decide_round
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.hooks import KindHooks
from gpuwarden.services.engine.node_ops import find_node, not_ours, pods_on
from gpuwarden.services.engine.result import Result, finished, notice_result
from gpuwarden.services.engine.writes import Patch, annotate, update_node

_LOST_EVENTS_KEPT = 8


def handle_instance_stopping(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """The state change recorded on its node, and whether the node had been drained."""
    node = find_node(deps.kube, deps.cloud, notice.instance_id, notice.node_name, deps.policy.cluster)
    recorder = Recorder(deps, notice.event_id)
    if node is None:
        return notice_result(notice, recorder, None, outcome="ignored", reason=not_ours(notice, deps.policy.cluster))
    pods = pods_on(deps.kube, node.name)
    return _record_loss(notice, recorder, node, pods)


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
    outcome = finished(recorder.deps.dry_run)
    return notice_result(notice, recorder, node, outcome=outcome, reason=reason)
