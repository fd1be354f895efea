"""Scheduled maintenance (AWS Health ``scheduledChange``, docs/events.md): drain inside the latest
allowed window that ends before the maintenance starts; if none fits, drain now so that the
drain ends before the start.

A plan is held on the node itself (annotations ``gpuwarden.io/maintenance-plan:
<window>@<start>``, ``…-plan-id``, ``…-event-id``, ``…-deadline``: a re-delivery finds it and
schedules nothing twice), mirrored in the ledger, and acted on by a one-time EventBridge
Scheduler schedule (``at(…)``, named after the plan: idempotent) whose input is the
``maintenance-due`` tick. Locally there is no Scheduler: the result names the tick to invoke.

The NodePool's own budgets hold with or without gpuwarden windows (`domain.protections`): a
maintenance that a budget refuses now, with no window that fits, is planned for the latest moment
that still ends before its deadline (the deadline minus the drain it needs), naming the budget;
then the budget is asked again, and once the deadline forces the drain it no longer holds.

When the plan is due, the windows are asked again (a window's ``max_disruptions`` may be
used up by drains in progress): refused with time to spare, the plan waits 5 minutes and
asks again; refused with no time to spare, the drain runs, because the deadline is hard.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from dateutil.parser import isoparse

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.protections import do_not_disrupt_refusal
from gpuwarden.domain.views import NodeView
from gpuwarden.domain.windows import latest_allowed_window_before
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.disrupt import disrupt, ignored
from gpuwarden.services.engine.gangs import ask_only
from gpuwarden.services.engine.hooks import Disruption, KindHooks, Marked, Ran, Stop
from gpuwarden.services.engine.node_ops import find_node, not_ours, voluntary_verdict_of
from gpuwarden.services.engine.result import Outcome, Result, finished, notice_result
from gpuwarden.services.engine.writes import Patch, annotate, update_node
from gpuwarden.services.notices import plans

KIND = Kind.SCHEDULED_MAINTENANCE.value
#: How long a refused, due plan waits before it asks the windows again.
RETRY_AFTER = timedelta(minutes=5)


def plan_id_for(event_id: str) -> str:
    """Deterministic per (Health event, instance): the schedule's name, so a re-delivery is a no-op."""
    return "maint-" + hashlib.sha256(event_id.encode()).hexdigest()[:20]


def due_tick(plan_id: str) -> dict[str, str]:
    """The Scheduler input that runs the plan (the scheduled function, ``maintenance-due``)."""
    return plans.due_tick("maintenance-due", plan_id)


# --------------------------------------------------------------------------- the notice


def handle_maintenance(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """Plan the drain into a window before the maintenance starts, or drain now when none fits."""
    recorder = Recorder(deps, notice.event_id)
    node = find_node(deps.kube, deps.cloud, notice.instance_id, notice.node_name, deps.policy.cluster)
    if node is None:
        return notice_result(notice, recorder, None, outcome="ignored", reason=not_ours(notice, deps.policy.cluster))
    if node.annotations.get(ann.EVENT_ID) == notice.event_id:
        return _execute(notice, recorder, node, hooks, drain_locally, "the drain had begun: resumed")
    held = node.annotations.get(ann.MAINTENANCE_PLAN)
    if node.annotations.get(ann.MAINTENANCE_PLAN_ID) == plan_id_for(notice.event_id) and held:
        _schedule(recorder, node, plan_id_for(notice.event_id), _held_start(held))  # idempotent by name
        reason = f"already planned: drain {node.name} in {_describe_held(held)}"
        return notice_result(notice, recorder, node, outcome="duplicate", reason=reason)
    return _plan_or_drain(notice, recorder, node, hooks, drain_locally)


def _plan_or_drain(notice: Notice, recorder: Recorder, node: NodeView, hooks: KindHooks, drain_locally: bool) -> Result:
    deps = recorder.deps
    now = deps.window_clock()
    deadline = notice.deadline or now
    needed = plans.drain_estimate(deps)
    found = None
    if deps.policy.windows and deadline - now >= needed:
        found = latest_allowed_window_before(deps.policy.windows, now, deadline, node.nodepool, needed)
    if found is None:
        verdict = voluntary_verdict_of(deps, node, lambda: deps.kube.list_pods_on_node(node.name), notice.kind, now)
        latest = deadline - needed
        if verdict.by == "budget" and verdict.refused and latest - now >= RETRY_AFTER:
            held = f"{BUDGET_PLAN}{node.nodepool}@{ann.rfc3339(latest)}"
            return _hold(notice, recorder, node, held, f"refused now: {verdict.refused}")
        why = (
            f"no allowed window of {_hours(needed)} fits before the maintenance starts at {ann.rfc3339(deadline)}: "
            "draining now so that it ends before the start"
        )
        if not deps.policy.windows:
            why = "no budget windows configured: draining now"
        if verdict.refused:
            why = f"{why} ({verdict.refused}, but the maintenance starts at {ann.rfc3339(deadline)})"
        return _execute(notice, recorder, node, hooks, drain_locally, why)
    assert found.usable is not None  # set by latest_allowed_window_before
    if found.usable.start <= now:
        why = f"window {found.name!r} {found.describe()} is open now, before the maintenance starts"
        return _when_due(notice, recorder, node, hooks, drain_locally, why)
    return _hold(notice, recorder, node, f"{found.name}@{ann.rfc3339(found.usable.start)}", found.describe())


def _hours(span: timedelta) -> str:
    minutes = int(span.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


# --------------------------------------------------------------------------- holding a plan


def _held_start(held: str) -> datetime:
    return isoparse(held.rpartition("@")[2])


#: A plan held for the latest start before the deadline, because the NodePool's budget refused
#: (``gpuwarden.io/maintenance-plan: nodepool-budget:<pool>@<start>``), not for a window.
BUDGET_PLAN = "nodepool-budget:"


#: A plan held because `karpenter.sh/do-not-disrupt` refuses the drain (``…-plan:
#: do-not-disrupt@<start>``): at its start the node's opted-in pods are asked to checkpoint.
DO_NOT_DISRUPT_PLAN = "do-not-disrupt"


def _describe_held(held: str) -> str:
    window, _, start = held.rpartition("@")
    if window == DO_NOT_DISRUPT_PLAN:
        return (
            f"the latest start that ends before the deadline, {start} (karpenter.sh/do-not-disrupt refuses the drain)"
        )
    if window.startswith(BUDGET_PLAN):
        pool = window.removeprefix(BUDGET_PLAN)
        return f"the latest start that ends before the deadline, {start} (NodePool {pool}'s budget refuses now)"
    return f"window {window!r} from {start}"


def _hold(notice: Notice, recorder: Recorder, node: NodeView, held: str, describe: str) -> Result:
    """Plan the drain for the held start (``<window>@<start>``, or a budget's, `BUDGET_PLAN`)."""
    start = _held_start(held)
    plan_id = plan_id_for(notice.event_id)
    window = held.rpartition("@")[0]
    by_budget = window.startswith(BUDGET_PLAN) or window == DO_NOT_DISRUPT_PLAN
    node, fresh = _annotate_plan(recorder, node, notice, plan_id, held)
    if not fresh:
        return notice_result(
            notice, recorder, node, outcome="duplicate", reason=f"already planned: {_describe_held(held)}"
        )
    recorder.add(
        ActionType.MAINTENANCE_PLANNED,
        node,
        plan_id=plan_id,
        window=None if by_budget else window,
        nodepool=node.nodepool if by_budget else None,
        start=ann.rfc3339(start),
        deadline=ann.rfc3339(notice.deadline) if notice.deadline else None,
        reason=f"drain in {_describe_held(held)} {describe}",
    )
    recorder.flush()
    if not recorder.deps.dry_run:
        recorder.deps.ledger.record(
            f"maintenance-plan#{plan_id}",
            {"node": node.name, "event_id": notice.event_id, "plan": held, "deadline": str(notice.deadline)},
        )
    _schedule(recorder, node, plan_id, start)
    reason = (
        f"planned: drain {node.name} in {_describe_held(held)} {describe}, "
        f"before the maintenance starts at {ann.rfc3339(notice.deadline or start)}"
    )
    return notice_result(notice, recorder, node, outcome=finished(recorder.deps.dry_run), reason=reason)


def _annotate_plan(
    recorder: Recorder, node: NodeView, notice: Notice, plan_id: str, held: str
) -> tuple[NodeView, bool]:
    """Write the plan on the node, RV-checked. (node, False) when a concurrent delivery wrote it first."""
    patch = annotate(
        {
            ann.MAINTENANCE_PLAN: held,
            ann.MAINTENANCE_PLAN_ID: plan_id,
            ann.MAINTENANCE_EVENT_ID: notice.event_id,
            ann.MAINTENANCE_DEADLINE: ann.rfc3339(notice.deadline or recorder.deps.clock()),
        }
    )

    def decide(current: NodeView) -> Patch | None:
        planned = current.annotations.get(ann.MAINTENANCE_PLAN_ID) == plan_id
        return None if planned and current.annotations.get(ann.MAINTENANCE_PLAN) else patch

    written = update_node(recorder.deps.kube, node, decide)
    return written.obj or node, written.written


def _schedule(recorder: Recorder, node: NodeView, plan_id: str, at: datetime, name: str | None = None) -> None:
    plans.schedule_plan(recorder, name or plan_id, at, due_tick(plan_id), f"maintenance-due tick for plan {plan_id}")


# --------------------------------------------------------------------------- the plan is due


def run_plan(plan_id: str, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """The ``maintenance-due`` tick: find the node holding the plan and drain it (windows permitting)."""
    node = next((n for n in deps.kube.list_nodes() if n.annotations.get(ann.MAINTENANCE_PLAN_ID) == plan_id), None)
    if node is None:
        reason = f"no node holds maintenance plan {plan_id} (the node is gone, or the plan was replaced)"
        return Result(outcome="ignored", kind=KIND, event_id=plan_id, reason=reason)
    notice = _notice_of(node, deps.clock())
    held = node.annotations.get(ann.MAINTENANCE_PLAN, "")
    recorder = Recorder(deps, notice.event_id)
    return _when_due(notice, recorder, node, hooks, drain_locally, f"plan {plan_id} is due ({_describe_held(held)})")


def _notice_of(node: NodeView, now: datetime) -> Notice:
    deadline = node.annotations.get(ann.MAINTENANCE_DEADLINE)
    return Notice(
        kind=Kind.SCHEDULED_MAINTENANCE,
        event_id=node.annotations.get(ann.MAINTENANCE_EVENT_ID) or plan_id_for(node.name),
        instance_id=node.instance_id,
        node_name=node.name,
        deadline=isoparse(deadline) if deadline else None,
        event_time=now,
        source="aws.health",
        detail_type="AWS Health Event",
    )


def _when_due(
    notice: Notice, recorder: Recorder, node: NodeView, hooks: KindHooks, drain_locally: bool, why: str
) -> Result:
    """Ask the windows and the NodePool's budgets now; wait and ask again while there is time, else
    drain (once the deadline forces it, neither holds it)."""
    deps = recorder.deps
    now = deps.window_clock()
    verdict = voluntary_verdict_of(deps, node, lambda: deps.kube.list_pods_on_node(node.name), notice.kind, now)
    if verdict.refused is None:
        allowed = "; ".join(r for r in (verdict.allowance.reason, verdict.budget and verdict.budget.reason) if r)
        return _execute(notice, recorder, node, hooks, drain_locally, f"{why}; {allowed}")
    deadline = notice.deadline or now
    if deadline - now < plans.drain_estimate(deps) + RETRY_AFTER:
        late = f"{why}; {verdict.refused}, but the maintenance starts at {ann.rfc3339(deadline)}: draining now"
        return _execute(notice, recorder, node, hooks, drain_locally, late)
    retry = now + RETRY_AFTER
    plan_id = node.annotations.get(ann.MAINTENANCE_PLAN_ID) or plan_id_for(notice.event_id)
    refused_by = {"window": verdict.allowance.window} if verdict.by == "window" else {"nodepool": node.nodepool}
    recorder.add(ActionType.REFUSED, node, reason=verdict.refused, retry_at=ann.rfc3339(retry), **refused_by)
    recorder.flush()
    _schedule(recorder, node, plan_id, retry, name=f"{plan_id}-{retry.strftime('%Y%m%d%H%M')}")
    reason = f"{why}; refused: {verdict.refused}; asking again at {ann.rfc3339(retry)}"
    return notice_result(notice, recorder, node, outcome="ignored", reason=reason)


def no_do_not_disrupt(d: Disruption) -> str | None:
    """The guard: the windows were asked when the plan was made (and again when it fell due), so
    the mark only checks `karpenter.sh/do-not-disrupt` (`domain.protections`). A refusal does not
    end the notice: AWS takes the instance at the deadline whatever holds its pods, so the node's
    opted-in pods are asked to checkpoint, nothing evicted, at the latest start that still leaves
    the drain's time before the deadline (docs/protections.md, "Reading a cell")."""
    refused = do_not_disrupt_refusal(d.notice.kind, d.node, d.pods)
    if refused is not None:
        _before_the_instance_goes(d)
    return refused


def _before_the_instance_goes(d: Disruption) -> None:
    """With time to spare, plan the latest start (a due tick then, as a budget's refusal is held);
    from then on, ask the node's opted-in pods and their gangs to checkpoint, evicting nothing."""
    deps = d.deps
    now = deps.window_clock()
    latest = (d.notice.deadline or now) - plans.drain_estimate(deps)
    if latest - now < RETRY_AFTER:
        ask_only(d.recorder, d.node, d.pods, d.notice.deadline)
        return
    plan_id = d.node.annotations.get(ann.MAINTENANCE_PLAN_ID)
    if plan_id is None:
        _hold(d.notice, d.recorder, d.node, f"{DO_NOT_DISRUPT_PLAN}@{ann.rfc3339(latest)}", "asking its pods then")
    else:  # the node holds a plan for an earlier start (a window): one more due tick, at the latest start
        _schedule(d.recorder, d.node, plan_id, latest, name=f"{plan_id}-{latest.strftime('%Y%m%d%H%M')}")


def _execute(
    notice: Notice, recorder: Recorder, node: NodeView, hooks: KindHooks, drain_locally: bool, why: str
) -> Result:
    """Cordon + taint ``scheduled-maintenance``, checkpoint, replace, drain with the voluntary rules:
    the one sequence, for the reason the plan gives now."""
    return disrupt(notice, recorder.deps, hooks, drain_locally, node=node, recorder=recorder, why=why)


def refused(stop: Stop) -> Result:
    """The kind's answer to a stop: do-not-disrupt's refusal is recorded on the node, with its Event."""
    if not stop.refused or stop.node is None:
        return ignored(stop)
    stop.recorder.add(ActionType.REFUSED, stop.node, reason=stop.reason)
    stop.recorder.flush()
    reason = f"{stop.why}; refused: {stop.reason}"
    return notice_result(stop.notice, stop.recorder, stop.node, outcome="ignored", reason=reason)


def drained(d: Disruption, marked: Marked, ran: Ran, why: str) -> Result:
    """The kind's answer once it ran: the plan's reason, whether the drain began now or resumed."""
    outcome: Outcome = finished(d.deps.dry_run, "handled" if marked.changed else "duplicate")
    state = ran.state
    return notice_result(
        d.notice,
        d.recorder,
        d.node,
        outcome=outcome,
        reason=why,
        drain=state.model_dump(mode="json") if state else None,
        seconds_left=state.seconds_left if state else None,
        checkpoints=ran.looks.as_result(),
    )
