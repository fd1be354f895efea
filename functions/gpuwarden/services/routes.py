"""The one routing table: every input gpuwarden takes, to its use case (docs/architecture.md).

- each notice kind → its use case, and the `KindHooks` that kind runs the one sequence with;
- each Scheduler tick action → its use case, and the kind its answer reports;
- each drain-workflow round → settled by its kind's hooks.

Handlers, the command line's local runner and the drain workflow route through here; nothing
below imports it. A new kind is one row in `USE_CASES`, one in `HOOKS` (when its hooks differ
from its class's defaults), and its source model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpuwarden.domain.alerts import alert_plan
from gpuwarden.domain.errors import CloudError, GpuwardenError
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.switches import KIND_SWITCHES, TICK_SWITCHES, is_on, off_reason
from gpuwarden.observability import count_event, logger
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.failures import failed_notice, failed_result
from gpuwarden.services.engine.pipeline import URGENT, KindHooks, round_of
from gpuwarden.services.engine.result import Result, record_result
from gpuwarden.services.notices import capacity, gpu_health, gpu_idle, interruption, maintenance
from gpuwarden.services.release import release
from gpuwarden.services.runbook import actions as runbook
from gpuwarden.services.windows import windows
from gpuwarden.sources import AlertBatch, NoticeBatch, ScanTick, WindowTick
from gpuwarden.sources.routing import KIND_OF

# --------------------------------------------------------------------------- kinds

#: Each kind's hooks into the one disruption sequence (`engine.pipeline`).
HOOKS: dict[Kind, KindHooks] = {
    Kind.SPOT_INTERRUPTION: karpenter.INVOLUNTARY,
    Kind.REBALANCE: karpenter.REBALANCE,
    Kind.INSTANCE_STOPPING: URGENT,
    Kind.CAPACITY_RESERVATION_INTERRUPTION: karpenter.INVOLUNTARY,
    Kind.CAPACITY_BLOCK_EXPIRY: karpenter.INVOLUNTARY,
    # the planned drain: involuntary, deadline at the start of termination
    Kind.CAPACITY_BLOCK_PLAN: karpenter.INVOLUNTARY,
    Kind.SCHEDULED_MAINTENANCE: maintenance.HOOKS,
    Kind.GPU_IDLE: gpu_idle.HOOKS,
    # as Spot's, with the breaker (gpu_health.max_unhealthy_percent) before and after the mark
    Kind.GPU_UNHEALTHY: gpu_health.HOOKS,
    Kind.MANUAL: runbook.HOOKS,
}


def hooks_for(kind: Kind) -> KindHooks:
    """A kind without an entry gets the defaults of its class; an involuntary one is protected
    beside Karpenter, as the Spot and capacity warnings are."""
    return HOOKS.get(kind, URGENT if kind.voluntary else karpenter.INVOLUNTARY)


UseCase = Callable[[Notice, Deps, bool], Result]


def _warning(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    return interruption.handle_interruption(notice, deps, hooks_for(notice.kind), drain_locally=drain_locally)


def _block_expiry(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    return capacity.handle_block_expiry(notice, deps, hooks_for(notice.kind), drain_locally=drain_locally)


def _block_delivered(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    return capacity.handle_block_delivered(notice, deps, hooks_for(notice.kind), drain_locally=drain_locally)


def _maintenance(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    return maintenance.handle_maintenance(notice, deps, drain_locally=drain_locally)


#: Each notice kind's use case.
USE_CASES: dict[Kind, UseCase] = {
    Kind.SPOT_INTERRUPTION: _warning,
    Kind.REBALANCE: _warning,
    Kind.INSTANCE_STOPPING: _warning,
    Kind.CAPACITY_RESERVATION_INTERRUPTION: _warning,
    Kind.CAPACITY_BLOCK_EXPIRY: _block_expiry,
    Kind.CAPACITY_BLOCK_PLAN: _block_delivered,
    Kind.SCHEDULED_MAINTENANCE: _maintenance,
    Kind.GPU_IDLE: gpu_idle.handle_gpu_idle,
    Kind.GPU_UNHEALTHY: gpu_health.handle_gpu_unhealthy,
}


def _counted(result: Result) -> Result:
    count_event(result.kind, result.outcome)
    return result


def _recorded(result: Result, deps: Deps) -> Result:
    """The one ledger write of every answer (`record_result`): the answers it sums first (each
    under its own event id: a Capacity Block's nodes), then itself."""
    children = [_recorded(child, deps) for child in result.results or []]
    if children:
        result = result.model_copy(update={"results": children})
    return record_result(result, deps)


def _failed(result: Result, deps: Deps) -> Result:
    """A failed answer is recorded too; a ledger that fails as well is not the failure reported."""
    try:
        return _recorded(result, deps)
    except CloudError as ledger_err:
        logger.warning("failure not recorded in the ledger", extra={"error": str(ledger_err)})
        return result


def _one(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    """One notice's answer, recorded; a failure (cluster, credentials, endpoint, retries) is the
    failed answer."""
    use_case = USE_CASES.get(notice.kind)
    if use_case is None:
        reason = f"the {notice.kind.value} notices are not handled by this version"
        return Result(outcome="failed", kind=notice.kind.value, event_id=notice.event_id, reason=reason)
    off = off_reason(deps.policy, KIND_SWITCHES.get(notice.kind.value))
    if off is not None:  # switched off by name in the policy (domain/switches.py)
        ignored = Result(
            outcome="ignored",
            kind=notice.kind.value,
            event_id=notice.event_id,
            node=notice.node_name,
            instance_id=notice.instance_id,
            reason=off,
        )
        return _counted(_recorded(ignored, deps))
    try:
        return _counted(_recorded(use_case(notice, deps, drain_locally), deps))
    except GpuwardenError as err:
        return _failed(failed_notice(notice, err), deps)


def handle_batch(batch: NoticeBatch, deps: Deps, *, drain_locally: bool = True) -> Result:
    """Every notice of one event through its use case; several notices make one summed answer."""
    kind = batch.reported_kind.value
    if batch.ignored is not None or not batch.notices:
        reason = batch.ignored or "the event names no instance"
        ignored = Result(outcome="ignored", kind=kind, event_id=batch.event_id, reason=reason)
        return _counted(_recorded(ignored, deps))
    return _summed([_one(n, deps, drain_locally) for n in batch.notices])


def _summed(results: list[Result]) -> Result:
    if len(results) == 1:
        return results[0]
    outcomes = {r.outcome for r in results}
    outcome = "failed" if "failed" in outcomes else "handled" if "handled" in outcomes else results[0].outcome
    return Result(
        outcome=outcome,
        kind=results[0].kind,
        reason=f"{len(results)} instances: " + "; ".join(f"{r.node or r.instance_id}: {r.outcome}" for r in results),
        actions=[a for r in results for a in r.actions],
        results=results,
    )


# --------------------------------------------------------------------------- GPU signals


def handle_scan(tick: ScanTick | None, deps: Deps, *, drain_locally: bool = True) -> Result:
    """One GPU-health scan (the every-minute schedule, or `gpuwarden scan`). A scan that cannot
    list the nodes (cluster, credentials, retries) is the failed answer."""
    try:
        scanned = gpu_health.scan(deps, drain_locally=drain_locally)
    except GpuwardenError as err:
        scan_id = tick.execution_id if tick is not None else None
        return _failed(failed_result(Kind.GPU_UNHEALTHY.value, err, event_id=scan_id), deps)
    return _counted(_recorded(scanned, deps))


def handle_alerts(batch: AlertBatch, deps: Deps, *, drain_locally: bool = True) -> Result:
    """An Alertmanager notification: every firing alert the policy maps is one notice, through
    its kind's use case; the others are ignored with the reason (docs/gpu-signals.md). What a
    truncated message lost is reported in the answer's reason."""
    plan = alert_plan(batch.alerts, deps.policy, batch.published)  # raises InvalidEvent before anything is written
    results = [
        _one(item, deps, drain_locally)
        if isinstance(item, Notice)
        else Result(outcome="ignored", kind=item[0], reason=item[1], event_id=batch.message_id)
        for item in plan
    ]
    acted = [r for item, r in zip(plan, results, strict=True) if isinstance(item, Notice)]
    if not acted:  # nothing asked of gpuwarden: one ignored answer, recorded under the message id
        reasons = [r.reason for r in results] or [f"notification {batch.message_id} carries no alert"]
        reason = "; ".join([*reasons[:10], *([batch.lost] if batch.lost else [])])
        kind = results[0].kind if results else Kind.GPU_UNHEALTHY.value
        summed = Result(outcome="ignored", kind=kind, reason=reason, event_id=batch.message_id)
        return _counted(
            _recorded(summed, deps).model_copy(update={"results": results})
            if len(results) > 1
            else _recorded(summed, deps)
        )
    # one node acted on (a dcgm-exporter alert fires per GPU): its answer, with the others beside it
    summed = acted[0] if len(results) == 1 else _summed(results)
    if len(acted) == 1 and len(results) > 1:
        summed = acted[0].model_copy(update={"results": results})
    if batch.lost:
        logger.warning(
            "alertmanager notification truncated", extra={"message_id": batch.message_id, "lost": batch.lost}
        )
        summed = summed.model_copy(update={"reason": f"{summed.reason}; {batch.lost}"})
    return summed


# --------------------------------------------------------------------------- Scheduler ticks

#: The kind a tick's answer reports, by its action (open / close / reconcile: the windows').
TICK_KINDS: dict[str, Kind] = {
    "maintenance-due": Kind.SCHEDULED_MAINTENANCE,
    "capacity-block-due": Kind.CAPACITY_BLOCK_PLAN,
}


def tick_kind(tick: WindowTick) -> str:
    """The contract kind a Scheduler tick reports as."""
    return TICK_KINDS.get(tick.action, Kind.BUDGET_WINDOW).value


def handle_tick(tick: WindowTick, deps: Deps, *, drain_locally: bool = True) -> Result:
    """One Scheduler tick: a maintenance or Capacity Block plan falling due runs it; open / close /
    reconcile keep the NodePools in step, and the reconcile also plans the Capacity Blocks in use.
    A switched-off behaviour's tick is ignored; with the NodePool windows off, the reconcile sees
    no window (so it writes back whatever a window had changed, and plans the blocks)."""
    off = off_reason(deps.policy, TICK_SWITCHES.get(tick.action))
    if off is not None:
        ignored = Result(outcome="ignored", kind=tick_kind(tick), event_id=tick.execution_id, reason=off)
        return _counted(_recorded(ignored, deps))
    if not is_on(deps.policy, "nodepool_windows.enabled"):
        deps = replace(deps, policy=deps.policy.model_copy(update={"windows": []}))
    planned: list[Result] = []  # the reconcile's Capacity Block plans: answers of their own
    try:
        result = _tick(tick, deps, drain_locally, planned)
    except GpuwardenError as err:
        failed = failed_result(tick_kind(tick), err, event_id=tick.plan_id or tick.execution_id)
        return _failed(failed, deps)
    for plan in planned:
        _recorded(plan, deps)
    return _counted(_recorded(result, deps))


def _tick(tick: WindowTick, deps: Deps, drain_locally: bool, planned: list[Result]) -> Result:
    if tick.action == "maintenance-due":
        assert tick.plan_id is not None  # the model requires it for maintenance-due
        return maintenance.run_plan(tick.plan_id, deps, drain_locally=drain_locally)
    if tick.action == "capacity-block-due":
        assert tick.plan_id is not None  # the model requires it for capacity-block-due
        hooks = hooks_for(Kind.CAPACITY_BLOCK_PLAN)
        return capacity.run_block_plan(tick.plan_id, deps, hooks, drain_locally=drain_locally)

    def blocks(recorder: Recorder) -> str:
        hooks = hooks_for(Kind.CAPACITY_BLOCK_PLAN)
        return capacity.reconcile_blocks(recorder, hooks, drain_locally=drain_locally, planned=planned)

    return windows.reconcile_windows(tick, deps, also=blocks if tick.action == "reconcile" else None)


# --------------------------------------------------------------------------- the way back


def handle_release(deps: Deps, node: str | None) -> Result:
    """`gpuwarden release`: gpuwarden's marks taken back on one node, or on every node and then
    every NodePool the windows changed (docs/rollback.md)."""
    event_id = f"release-{node or 'all'}-{deps.clock():%Y%m%dT%H%M%S%fZ}"
    also = windows.restore_nodepools if node is None else None
    try:
        result = release.release(deps, node, event_id=event_id, also=also)
    except GpuwardenError as err:
        return _failed(failed_result(Kind.MANUAL.value, err, event_id=event_id, node=node), deps)
    return _counted(_recorded(result, deps))


# --------------------------------------------------------------------------- the drain workflow


def drain_round(recorder: Recorder, state: DrainState) -> DrainState:
    """One round of the drain workflow, settled by its kind."""
    return round_of(recorder, state, hooks_for(state.kind))


# --------------------------------------------------------------------------- before routing


def fallback_kind(raw: object) -> str:
    """The contract kind of an input whose handling failed before it was routed."""
    if isinstance(raw, dict):
        tag = raw.get("detail-type", raw.get("detail_type"))
        if isinstance(tag, str) and tag in KIND_OF:
            return KIND_OF[tag].value
        if raw.get("gpuwarden") == "gpu-health-scan" or "Records" in raw:
            return Kind.GPU_UNHEALTHY.value
        if "gpuwarden" in raw:
            return Kind.BUDGET_WINDOW.value
    return Kind.MANUAL.value
