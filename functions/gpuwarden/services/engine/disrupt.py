"""The one disruption sequence, from a notice to its answer (docs/architecture.md, "The pipeline"):

    resolve the node (not ours: ignored) → the kind's plan → guards → mark (`guard_and_mark`)
    → urgent deliveries, replacement, drain rounds (`run_steps`) → the answer (`result_of`)

Every kind that disrupts a node runs it through `disrupt`, with its spec's hooks (gpuwarden/kinds/):
what its plan asks for, what its guards refuse, how a stop and a run are answered. A use case
that needs a step of its own first (the GPU-idle alarm's state, a maintenance plan, a Capacity
Block's nodes, a scan's breaker) takes it, then calls `disrupt`.
"""

from __future__ import annotations

from functools import cache

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.budgets import VoluntaryVerdict, voluntary_verdict
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.domain.windows import voluntary_allowance
from gpuwarden.services.engine.context import Deps, FanOut, Recorder
from gpuwarden.services.engine.failures import what_failed
from gpuwarden.services.engine.hooks import Disruption, KindHooks, Marked, Ran, RoundReport, Steps, Stop
from gpuwarden.services.engine.node_ops import find_node, not_ours, voluntary_verdict_of
from gpuwarden.services.engine.pipeline import guard_and_mark, hand_on, run_steps
from gpuwarden.services.engine.plan import notice_plan
from gpuwarden.services.engine.replace import mark_claim
from gpuwarden.services.engine.result import Outcome, Result, finished, notice_result


def disrupt(
    notice: Notice,
    deps: Deps,
    hooks: KindHooks,
    drain_locally: bool = True,
    *,
    node: NodeView | None = None,
    recorder: Recorder | None = None,
    why: str | None = None,
    fan_out: FanOut | None = None,
    pods: list[PodView] | None = None,
    on_round: RoundReport | None = None,
) -> Result:
    """The one sequence for ``notice`` with its kind's ``hooks``. ``node``: already resolved by the
    use case; ``recorder``: the use case's own, when it recorded steps before; ``why``: the reason
    the use case gives for acting now, in place of the plan's; ``fan_out``: the other runs of one
    Capacity Block beside this one; ``pods``: the node's pods, when the use case listed them (its
    plan was drawn on them); ``on_round``: called after every local drain round (a terminal's
    progress)."""
    recorder = recorder or Recorder(deps, notice.event_id)
    if node is None:
        node = find_node(deps.kube, deps.cloud, notice.instance_id, notice.node_name, deps.policy.cluster)
        if node is None:
            return _stopped(hooks, Stop(notice, recorder, None, not_ours(notice, deps.policy.cluster), why or ""))
    d = Disruption(notice, deps, node, hooks, drain_locally, on_round=on_round, fan_out=fan_out, _pods=pods)
    d.recorder = recorder
    try:
        return _marked_and_run(d, why)
    except GpuwardenError as err:  # the failed answer keeps what was done (docs/results.md)
        raise err.done_so_far(d.node.name, recorder.actions) from None


def _marked_and_run(d: Disruption, why: str | None) -> Result:
    notice, deps, hooks, node, recorder = d.notice, d.deps, d.hooks, d.node, d.recorder
    voluntary = deps.is_voluntary(notice.kind)
    # An involuntary notice cordons before anything else is read: its plan needs no pods.
    windows = cache(lambda: _allowance(d, voluntary))
    plan = hooks.admission.plan(node, d.pods if voluntary else [], deps.policy, windows)
    why = why or plan.reason
    claim = (
        mark_claim(node, notice, deps.policy.replacement) if plan.replace and hooks.delivery.claim_with_mark else None
    )
    marked = guard_and_mark(d, why, claim)
    if marked.stopped:
        reason = marked.refused or marked.held_reason()
        return _stopped(hooks, Stop(notice, recorder, marked.node, reason, why, refused=marked.refused is not None))
    if plan.refused:
        recorder.add(ActionType.REFUSED, d.node, reason=plan.refused)
    steps = Steps(checkpoint=plan.checkpoint, replace=plan.replace, drain=plan.drain)
    reason = why if not plan.refused else f"{why}; drain refused: {plan.refused}"
    try:
        ran = run_steps(d, steps)
    except GpuwardenError as err:  # after the mark: the drain workflow owns the drain
        handed = hand_on(d, steps, err)
        if handed is None:
            raise
        ran, reason = handed, f"{reason}; after the mark, {what_failed(err)}: the drain workflow took over"
    return (hooks.settlement.answer or result_of)(d, marked, ran, reason)


def _allowance(d: Disruption, voluntary: bool) -> VoluntaryVerdict:
    """Only a voluntary kind asks the windows and the NodePool's budgets (spot interruptions and
    state changes never wait)."""
    deps, node = d.deps, d.node
    if voluntary:
        return voluntary_verdict_of(deps, node, lambda: d.pods, d.notice.kind)
    allowance = voluntary_allowance(deps.policy.windows, deps.window_clock(), node.nodepool, in_progress=0)
    return voluntary_verdict(allowance, None)


def _stopped(hooks: KindHooks, stop: Stop) -> Result:
    return (hooks.admission.stopped or ignored)(stop)


def ignored(stop: Stop) -> Result:
    """The default answer when the sequence stops before acting: ignored, with the reason."""
    return notice_result(stop.notice, stop.recorder, stop.node, outcome="ignored", reason=stop.reason)


def result_of(d: Disruption, marked: Marked, ran: Ran, reason: str) -> Result:
    """The default answer once the sequence ran: handled (dry-run), or duplicate when the mark was
    this notice's already (a redelivery that resumed what was left)."""
    deps, notice, state = d.deps, d.notice, ran.state
    outcome: Outcome = finished(deps.dry_run, "handled" if marked.changed else "duplicate")
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
        plan=(ran.plan or notice_plan(d.recorder, notice, d.pods)).as_rows() if deps.dry_run else None,
        checkpoints=ran.looks.as_result(),
    )
