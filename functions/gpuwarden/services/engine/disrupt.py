"""One notice for one node through the one sequence: the node-level plan (the kind's
`KindHooks.plan`), the mark, then `pipeline.run`. The Spot and capacity warnings, a rebalance
recommendation and every node of a Capacity Block come here with their kind's hooks, which the
dispatch hands in from the kind's spec (gpuwarden/kinds/)."""

from __future__ import annotations

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.drain import DrainContext, decide_round
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.schedule import Allowance, voluntary_allowance
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.node_ops import find_node, not_ours, window_allowance
from gpuwarden.services.engine.pipeline import Disruption, KindHooks, Steps, Taken, run, take
from gpuwarden.services.engine.replace import mark_claim
from gpuwarden.services.engine.result import Outcome, Result, notice_result


def _allowance(notice: Notice, deps: Deps, node: NodeView) -> Allowance:
    """Only a voluntary kind asks the windows (spot interruptions and state changes never wait)."""
    if deps.is_voluntary(notice.kind):
        return window_allowance(deps, node)
    return voluntary_allowance(deps.policy.windows, deps.window_clock(), node.nodepool, in_progress=0)


def disrupt(notice: Notice, deps: Deps, hooks: KindHooks, node: NodeView, *, drain_locally: bool = True) -> Result:
    """The node's plan for this notice, then the sequence with the kind's hooks."""
    d = Disruption(notice, deps, node, hooks, drain_locally)
    # An involuntary notice cordons before anything else is read: its plan needs no pods.
    pods = d.pods if deps.is_voluntary(notice.kind) else []
    plan = hooks.plan(node, pods, deps.policy, _allowance(notice, deps, node))
    claim = mark_claim(node, notice, deps.policy.replacement) if plan.replace and hooks.claim_with_mark else None
    taken = take(d, plan.reason, claim)
    if taken.stopped:
        return notice_result(notice, d.recorder, node, outcome="ignored", reason=taken.refused or taken.held_reason())
    if plan.refused:
        d.recorder.add(ActionType.REFUSED, d.node, reason=plan.refused)
    state = run(d, Steps(checkpoint=plan.checkpoint, replace=plan.replace, drain=plan.drain))
    reason = plan.reason if not plan.refused else f"{plan.reason}; drain refused: {plan.refused}"
    return answer(d, taken, state, reason)


def answer(d: Disruption, taken: Taken, state: DrainState | None, reason: str) -> Result:
    """The answer once the sequence ran: handled (dry-run), or duplicate when the mark was this
    notice's already (a redelivery that resumed what was left)."""
    deps, notice = d.deps, d.notice
    outcome: Outcome = "dry-run" if deps.dry_run else "handled" if taken.changed else "duplicate"
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
        plan=dry_run_plan(notice, deps, d.pods) if deps.dry_run else None,
    )


def disrupt_notice(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """Resolve the notice's node (not ours: ignored, with the reason), then `disrupt` it."""
    node = find_node(deps.kube, deps.cloud, notice.instance_id, notice.node_name)
    if node is None:
        recorder = Recorder(deps, notice.event_id)
        return notice_result(notice, recorder, None, outcome="ignored", reason=not_ours(notice, deps.policy.cluster))
    return disrupt(notice, deps, hooks, node, drain_locally=drain_locally)


def dry_run_plan(notice: Notice, deps: Deps, pods: list[PodView]) -> list[dict[str, object]]:
    """What a drain round would do to each pod now (the dry run's `plan`)."""
    ctx = DrainContext(
        event_id=notice.event_id,
        involuntary=not deps.is_voluntary(notice.kind),
        deadline=notice.deadline,
        now=deps.clock(),
        default_checkpoint_timeout=deps.policy.checkpoint.default_timeout_seconds,
        allow_exec=deps.policy.checkpoint.allow_exec,
    )
    return [step.as_dict() for step in decide_round(pods, ctx)]
