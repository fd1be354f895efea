"""Budget windows kept in step with Karpenter (docs/windows.md), and the Scheduler ticks that drive it.

Every tick is level-triggered: open, close and the periodic reconcile all compute what the
windows want on each NodePool *now* (``domain.windows.nodepool``) and write the difference,
so a missed, late or repeated schedule, or a NodePool edited by hand, converges at the next
tick. An ``open``/``close`` tick only narrows which NodePools are looked at (the window's own).

The windows never loosen a pool: their budget is added beside the pool's own, a GPU cap is
written only where lower, never on a static pool. The values replaced are saved first on the
NodePool itself (annotation ``gpuwarden.io/saved-budgets``) and written back exactly when no
window is open any more.

Each pool is reconciled on its own: a pool the API server refuses to write (422, 403, anything
that outlived the retries) is reported — in the result, as a metric and as a Kubernetes Event
on the pool — and the others go on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import GpuwardenError, KubeError
from gpuwarden.domain.windows import Window
from gpuwarden.domain.windows.nodepool import (
    NodePoolPlan,
    PoolFields,
    changed_fields,
    desired_nodepool_state,
    nodepool_patch,
    plan_nodepool,
)
from gpuwarden.domain.wording import count
from gpuwarden.observability import Metric, logger, put
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.result import Result, finished
from gpuwarden.services.engine.writes import Patch, update
from gpuwarden.sources import SchedulerTick

KIND = "budget-window"
#: Kubernetes Event reasons on a NodePool.
WRITE_FAILED = "NodePoolWriteFailed"
CAP_SKIPPED = "BudgetWindowCapSkipped"


def saved_fields(pool: dict[str, Any]) -> PoolFields | None:
    """The originals saved when a window first changed the pool; None when nothing is saved."""
    raw = ((pool.get("metadata") or {}).get("annotations") or {}).get(ann.SAVED_BUDGETS)
    if raw is None:
        return None
    try:
        return PoolFields.from_json(raw)
    except (ValueError, KeyError, TypeError) as err:
        name = (pool.get("metadata") or {}).get("name")
        raise GpuwardenError(
            f"NodePool {name}: annotation {ann.SAVED_BUDGETS} is not the JSON gpuwarden wrote ({err}); "
            "fix or remove it by hand (it holds the budgets to restore when the windows close)"
        ) from err


@dataclass(frozen=True)
class PoolChange:
    nodepool: str
    field: str
    was: Any
    now: Any
    reason: str


@dataclass
class PoolReport:
    """What was done to one NodePool, or why not: one entry of the result's ``nodepools``."""

    nodepool: str
    outcome: str = "in-step"  # written | in-step | failed | gone
    windows: tuple[str, ...] = ()
    reason: str = ""
    changes: list[PoolChange] = field(default_factory=list)
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"nodepool": self.nodepool, "outcome": self.outcome}
        entry |= {"windows": list(self.windows), "reason": self.reason}
        if self.changes:
            entry["fields"] = [c.field for c in self.changes]
        if self.skipped:
            entry["skipped"] = list(self.skipped)
        return entry


def _plan(pool: dict[str, Any], windows: list[Window], now: datetime) -> tuple[NodePoolPlan, dict[str, Any] | None]:
    spec = pool.get("spec") or {}
    saved = saved_fields(pool)
    desired = desired_nodepool_state(windows, now, pool["metadata"]["name"])
    plan = plan_nodepool(desired, PoolFields.of(spec), saved, static="replicas" in spec)
    return plan, nodepool_patch(spec, plan, saved)


def reconcile_nodepool(deps: Deps, pool: dict[str, Any], now: datetime) -> PoolReport:
    """Write what the windows want on one NodePool (RV-checked; re-read and re-decided on a conflict).

    Raises KubeError when the write is refused or outlives its retries, GpuwardenError when
    the saved originals do not read."""
    name = pool["metadata"]["name"]
    reports: list[PoolReport] = []

    def decide(current: dict[str, Any]) -> Patch | None:
        plan, patch = _plan(current, deps.policy.windows, now)
        report = PoolReport(name, windows=plan.windows, reason=plan.reason, skipped=plan.skipped)
        fields = PoolFields.of(current.get("spec") or {})
        report.changes = [
            PoolChange(name, f, was, to, plan.reason) for f, was, to in changed_fields(fields, plan.target)
        ]
        reports.append(report)
        return patch

    written = update(
        f"NodePool {name}",
        pool,
        decide,
        lambda patch, rv: deps.kube.patch_nodepool(name, patch, rv),
        lambda: deps.kube.get_nodepool(name),
        lambda current: current["metadata"].get("resourceVersion"),
    )
    if written.obj is None:
        return PoolReport(name, outcome="gone", reason="deleted while being reconciled")
    report = reports[-1]
    if not written.written:
        report.changes = []
        return report
    saved = ((written.obj.get("metadata") or {}).get("annotations") or {}).get(ann.SAVED_BUDGETS)
    if not deps.dry_run:
        entry = {"saved_budgets": saved or "", "reason": report.reason, "at": now.isoformat()}
        deps.ledger.record(f"nodepool#{name}", entry)
    report.outcome = "written"
    return report


def _post_event(deps: Deps, pool: dict[str, Any], reason: str, message: str, warning: bool) -> None:
    if deps.dry_run:
        return
    try:
        deps.kube.create_nodepool_event(pool, reason, message, warning)
    except KubeError as err:  # an Event is a courtesy: the report is in the result and the metric
        logger.warning("event not posted", extra={"reason": reason, "error": str(err)})


def _reconcile_one(deps: Deps, pool: dict[str, Any], now: datetime) -> PoolReport:
    """One pool on its own: a refusal is reported (result, metric, Event), never raised."""
    name = pool["metadata"]["name"]
    try:
        report = reconcile_nodepool(deps, pool, now)
    except GpuwardenError as err:  # KubeError included: 422, 403, retries exhausted, conflicts
        status = getattr(err, "status", None)
        logger.error("nodepool not reconciled", extra={"nodepool": name, "status": status, "error": str(err)})
        if not deps.dry_run:
            put(Metric.NODEPOOL_WRITES_FAILED)
        _post_event(deps, pool, WRITE_FAILED, f"budget windows not applied: {err}", warning=True)
        opened = desired_nodepool_state(deps.policy.windows, now, name).windows
        return PoolReport(name, outcome="failed", windows=opened, reason=str(err))
    if report.outcome == "written" and report.skipped:
        _post_event(deps, pool, CAP_SKIPPED, "; ".join(report.skipped), warning=False)
    return report


def _scope(tick: SchedulerTick, deps: Deps) -> tuple[Window | None, str | None]:
    """The window an open/close tick names, or the reason to ignore the tick."""
    if tick.window is None:
        return None, None
    window = next((w for w in deps.policy.windows if w.name == tick.window), None)
    if window is None:
        return None, f"window {tick.window!r} is not in the policy (a schedule of an older policy?): nothing done"
    return window, None


def _show(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, sort_keys=True)


def _record(recorder: Recorder, reports: list[PoolReport], drift: bool) -> list[PoolChange]:
    changes = [change for report in reports for change in report.changes]
    for c in changes:
        kind = ActionType.NODEPOOL_DRIFT if drift else ActionType.NODEPOOL_SET
        recorder.add(kind, nodepool=c.nodepool, field=c.field, was=c.was, now=c.now, reason=c.reason)
        if drift:
            logger.warning(
                f"drift: NodePool {c.nodepool} {c.field} was {_show(c.was)}, now {_show(c.now)}",
                extra={"nodepool": c.nodepool, "field": c.field, "was": c.was, "now": c.now},
            )
    for report in reports:
        if report.outcome == "written":
            for why in report.skipped:
                recorder.add(ActionType.NODEPOOL_SKIPPED, nodepool=report.nodepool, reason=why)
        if report.outcome == "failed":
            recorder.add(ActionType.NODEPOOL_FAILED, nodepool=report.nodepool, reason=report.reason)
    return changes


def _summary(label: str, now: datetime, reports: list[PoolReport], changes: list[PoolChange], drift: bool) -> str:
    written = "; ".join(f"{c.nodepool} {c.field} {_show(c.was)} → {_show(c.now)}" for c in changes)
    what = ("drift repaired: " if drift else "written: ") + written if changes else "every NodePool in step"
    failed = [r for r in reports if r.outcome == "failed"]
    if failed and not changes:
        what = "nothing written"
    text = f"{label} at {ann.rfc3339(now)}: {count(len(reports), 'NodePool')} checked, {what}"
    if failed:
        text += f"; {len(failed)} not written: " + "; ".join(f"{r.nodepool}: {r.reason}" for r in failed)
    return text


def reconcile_windows(tick: SchedulerTick, deps: Deps, *, also: Callable[[Recorder], str] | None = None) -> Result:
    """One open / close / reconcile tick: the NodePools the windows want now, the difference written.
    `also` runs after them into the same record and appends its summary (the reconcile's Capacity
    Blocks, handed in by the routing table)."""
    now = deps.window_clock()
    window, ignored = _scope(tick, deps)
    label = f"{tick.action} {tick.window!r}" if tick.window else tick.action
    if ignored is not None:
        return Result(outcome="ignored", kind=KIND, reason=ignored)
    pools = deps.kube.list_nodepools()
    if window is not None and window.nodepools is not None:
        pools = [p for p in pools if p["metadata"]["name"] in window.nodepools]
    recorder = Recorder(deps, f"{KIND}-{tick.action}-{ann.rfc3339(now)}")
    reports = [_reconcile_one(deps, pool, now) for pool in pools]
    drift = tick.action == "reconcile"
    changes = _record(recorder, reports, drift)
    failed = any(r.outcome == "failed" for r in reports)
    reason = _summary(label, now, reports, changes, drift)
    if also is not None:
        reason += also(recorder)
    return Result(
        outcome="failed" if failed else finished(deps.dry_run),
        kind=KIND,
        event_id=recorder.event_id,
        reason=reason,
        actions=recorder.actions,
        nodepools=[r.to_json() for r in reports],
    )


def restore_nodepools(recorder: Recorder) -> str:
    """Every NodePool the windows changed, given back exactly as its owner left it: the saved
    originals written back as when the last window covering it closes (`gpuwarden release --all`).
    Into ``recorder``; answers the summary to append to its reason."""
    deps = replace(recorder.deps, policy=recorder.deps.policy.model_copy(update={"windows": []}))
    now = deps.window_clock()
    pools = [p for p in deps.kube.list_nodepools() if saved_fields(p) is not None]
    reports = [_reconcile_one(deps, pool, now) for pool in pools]
    changes = _record(recorder, reports, drift=False)
    label = "NodePools that would be restored" if deps.dry_run else "NodePools restored"
    return "; " + _summary(label, now, reports, changes, drift=False)
