"""Route parsed notices to their use case, exactly as the deployed EventBridge rules do."""

from __future__ import annotations

from collections.abc import Callable

from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.observability import count_event
from gpuwarden.services.capacity import handle_block_delivered, handle_block_expiry
from gpuwarden.services.context import Deps
from gpuwarden.services.failures import failed_notice
from gpuwarden.services.gpu_idle import handle_gpu_idle
from gpuwarden.services.interruption import handle_interruption
from gpuwarden.services.maintenance import handle_maintenance
from gpuwarden.services.result import Result
from gpuwarden.sources import NoticeBatch

NoticeHandler = Callable[[Notice, Deps, bool], Result]


def _interruption(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    return handle_interruption(notice, deps, drain_locally=drain_locally)


def _maintenance(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    return handle_maintenance(notice, deps, drain_locally=drain_locally)


#: route (the handler module the deployed rule targets) → use case
HANDLERS: dict[str, NoticeHandler] = {
    "interruption": _interruption,
    "gpu_idle": handle_gpu_idle,
    "maintenance": _maintenance,
}


#: kinds whose use case is not their route's default (a Capacity Block names a reservation, not a node)
KIND_HANDLERS: dict[Kind, NoticeHandler] = {
    Kind.CAPACITY_BLOCK_EXPIRY: handle_block_expiry,
    Kind.CAPACITY_BLOCK_PLAN: handle_block_delivered,
}


def _counted(result: Result) -> Result:
    count_event(result.kind, result.outcome)
    return result


def _record_ignored(deps: Deps, event_id: str, route: str, reason: str) -> None:
    """An event that asks nothing of gpuwarden still ends as a ledger record (nothing lost)."""
    if deps.dry_run:
        return
    if deps.ledger.get(event_id) is not None:
        deps.ledger.count_duplicate(event_id)
        return
    deps.ledger.record(event_id, {"outcome": "ignored", "kind": route, "reason": reason, "caller": deps.caller})


def _guarded(handler: NoticeHandler, notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    """One notice's result; a failure (cluster, credentials, endpoint, retries) is the failed result."""
    try:
        return _counted(handler(notice, deps, drain_locally))
    except GpuwardenError as err:
        return failed_notice(notice, deps, err)


def handle_batch(batch: NoticeBatch, deps: Deps, *, drain_locally: bool = True) -> Result:
    kind = batch.reported_kind.value
    if batch.ignored is not None or not batch.notices:
        reason = batch.ignored or "the event names no instance"
        if batch.event_id is not None:
            _record_ignored(deps, batch.event_id, kind, reason)
        return _counted(Result(outcome="ignored", kind=kind, event_id=batch.event_id, reason=reason))
    handler = HANDLERS.get(batch.route)
    if handler is None:
        first = batch.notices[0]
        return Result(
            outcome="failed",
            kind=first.kind.value,
            event_id=first.event_id,
            reason=f"the {batch.route} handler is not part of this version",
        )
    results = [_guarded(KIND_HANDLERS.get(n.kind, handler), n, deps, drain_locally) for n in batch.notices]
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
