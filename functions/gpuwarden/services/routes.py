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

from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.switches import KIND_SWITCHES, TICK_SWITCHES, is_on, off_reason
from gpuwarden.observability import count_event
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.failures import failed_notice
from gpuwarden.services.engine.pipeline import URGENT, KindHooks, round_of
from gpuwarden.services.engine.result import Result
from gpuwarden.services.notices import capacity, gpu_idle, interruption, maintenance
from gpuwarden.services.runbook import actions as runbook
from gpuwarden.services.windows import windows
from gpuwarden.sources import NoticeBatch, WindowTick
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
}


def _counted(result: Result) -> Result:
    count_event(result.kind, result.outcome)
    return result


def _record_ignored(deps: Deps, event_id: str, kind: str, reason: str) -> None:
    """An event that asks nothing of gpuwarden still ends as a ledger record (nothing lost)."""
    if deps.dry_run:
        return
    if deps.ledger.get(event_id) is not None:
        deps.ledger.count_duplicate(event_id)
        return
    deps.ledger.record(event_id, {"outcome": "ignored", "kind": kind, "reason": reason, "caller": deps.caller})


def _one(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    """One notice's result; a failure (cluster, credentials, endpoint, retries) is the failed result."""
    use_case = USE_CASES.get(notice.kind)
    if use_case is None:
        reason = f"the {notice.kind.value} notices are not handled by this version"
        return Result(outcome="failed", kind=notice.kind.value, event_id=notice.event_id, reason=reason)
    off = off_reason(deps.policy, KIND_SWITCHES.get(notice.kind.value))
    if off is not None:  # switched off by name in the policy (domain/switches.py)
        _record_ignored(deps, notice.event_id, notice.kind.value, off)
        ignored = Result(
            outcome="ignored",
            kind=notice.kind.value,
            event_id=notice.event_id,
            node=notice.node_name,
            instance_id=notice.instance_id,
            reason=off,
        )
        return _counted(ignored)
    try:
        return _counted(use_case(notice, deps, drain_locally))
    except GpuwardenError as err:
        return failed_notice(notice, deps, err)


def handle_batch(batch: NoticeBatch, deps: Deps, *, drain_locally: bool = True) -> Result:
    """Every notice of one event through its use case; several notices make one summed answer."""
    kind = batch.reported_kind.value
    if batch.ignored is not None or not batch.notices:
        reason = batch.ignored or "the event names no instance"
        if batch.event_id is not None:
            _record_ignored(deps, batch.event_id, kind, reason)
        return _counted(Result(outcome="ignored", kind=kind, event_id=batch.event_id, reason=reason))
    results = [_one(n, deps, drain_locally) for n in batch.notices]
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
        return _counted(Result(outcome="ignored", kind=tick_kind(tick), event_id=tick.execution_id, reason=off))
    if not is_on(deps.policy, "nodepool_windows.enabled"):
        deps = replace(deps, policy=deps.policy.model_copy(update={"windows": []}))
    if tick.action == "maintenance-due":
        assert tick.plan_id is not None  # the model requires it for maintenance-due
        return maintenance.run_plan(tick.plan_id, deps, drain_locally=drain_locally)
    if tick.action == "capacity-block-due":
        assert tick.plan_id is not None  # the model requires it for capacity-block-due
        hooks = hooks_for(Kind.CAPACITY_BLOCK_PLAN)
        return capacity.run_block_plan(tick.plan_id, deps, hooks, drain_locally=drain_locally)

    def blocks(recorder: Recorder) -> str:
        return capacity.reconcile_blocks(recorder, hooks_for(Kind.CAPACITY_BLOCK_PLAN), drain_locally=drain_locally)

    return windows.reconcile_windows(tick, deps, also=blocks if tick.action == "reconcile" else None)


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
        if "gpuwarden" in raw:
            return Kind.BUDGET_WINDOW.value
    return Kind.MANUAL.value
