"""Budget windows kept in step with Karpenter (CONTRACT §4), and the Scheduler ticks that drive it.

Every tick is level-triggered: open, close and the periodic reconcile all compute what the
windows want on each NodePool *now* (``desired_nodepool_state``) and write the difference, so
a missed, late or repeated schedule, or a NodePool edited by hand, converges at the next tick.
An ``open``/``close`` tick only narrows which NodePools are looked at (the window's own).

While a window is open, ``spec.disruption.budgets`` (and ``spec.limits["nvidia.com/gpu"]``
when a ``gpu_limit`` window is open) carry the window's values; the values they replaced are
saved first on the NodePool itself (annotation ``gpuwarden.io/saved-budgets``, JSON, ``null``
for a field that was absent) and written back exactly when no window is open any more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.errors import Conflict, GpuwardenError, KubeError
from gpuwarden.domain.views import GPU_RESOURCE
from gpuwarden.domain.windows import NodePoolDesired, Window, desired_nodepool_state
from gpuwarden.observability import logger
from gpuwarden.services.context import Deps, Recorder
from gpuwarden.services.result import Result
from gpuwarden.sources import WindowTick

KIND = "budget-window"
BUDGETS_FIELD = "spec.disruption.budgets"
GPU_FIELD = f'spec.limits["{GPU_RESOURCE}"]'
_MAX_CONFLICTS = 5


@dataclass(frozen=True)
class PoolFields:
    """The two fields gpuwarden manages on a NodePool, as JSON values (None: absent)."""

    budgets: Any
    gpu_limit: Any

    def as_json(self) -> str:
        return json.dumps({"budgets": self.budgets, "gpu_limit": self.gpu_limit}, sort_keys=True)


def current_fields(pool: dict[str, Any]) -> PoolFields:
    spec = pool.get("spec") or {}
    return PoolFields(
        budgets=(spec.get("disruption") or {}).get("budgets"),
        gpu_limit=(spec.get("limits") or {}).get(GPU_RESOURCE),
    )


def saved_fields(pool: dict[str, Any]) -> PoolFields | None:
    """The originals saved when a window first changed the pool; None when nothing is saved."""
    raw = ((pool.get("metadata") or {}).get("annotations") or {}).get(ann.SAVED_BUDGETS)
    if raw is None:
        return None
    try:
        saved = json.loads(raw)
        return PoolFields(budgets=saved["budgets"], gpu_limit=saved["gpu_limit"])
    except (ValueError, KeyError, TypeError) as err:
        name = (pool.get("metadata") or {}).get("name")
        raise GpuwardenError(
            f"NodePool {name}: annotation {ann.SAVED_BUDGETS} is not the JSON gpuwarden wrote ({err}); "
            "fix or remove it by hand (it holds the budgets to restore when the windows close)"
        ) from err


def target_fields(
    desired: NodePoolDesired, current: PoolFields, saved: PoolFields | None
) -> tuple[PoolFields, PoolFields | None]:
    """(what the pool should carry now, what must stay saved). Pure."""
    if desired.budgets is None:  # no window open: the originals come back
        return (saved, None) if saved is not None else (current, None)
    original = saved or current
    gpu = str(desired.gpu_limit) if desired.gpu_limit is not None else original.gpu_limit
    return PoolFields(budgets=desired.budgets, gpu_limit=gpu), original


def _differences(current: PoolFields, target: PoolFields) -> list[tuple[str, Any, Any]]:
    found = []
    if current.budgets != target.budgets:
        found.append((BUDGETS_FIELD, current.budgets, target.budgets))
    if current.gpu_limit != target.gpu_limit:
        found.append((GPU_FIELD, current.gpu_limit, target.gpu_limit))
    return found


def _patch(current: PoolFields, target: PoolFields, keep: PoolFields | None) -> dict[str, Any]:
    """A JSON merge patch of what differs (lists replace whole; ``null`` removes a field that was
    absent). A field left alone is not in the patch, so no empty parent object appears."""
    spec: dict[str, Any] = {}
    if current.budgets != target.budgets:
        spec["disruption"] = {"budgets": target.budgets}
    if current.gpu_limit != target.gpu_limit:
        spec["limits"] = {GPU_RESOURCE: target.gpu_limit}
    patch: dict[str, Any] = {"metadata": {"annotations": {ann.SAVED_BUDGETS: keep.as_json() if keep else None}}}
    if spec:
        patch["spec"] = spec
    return patch


@dataclass(frozen=True)
class PoolChange:
    nodepool: str
    field: str
    was: Any
    now: Any
    reason: str


def _plan(
    pool: dict[str, Any], windows: list[Window], now: datetime
) -> tuple[list[PoolChange], dict[str, Any] | None, str]:
    name = pool["metadata"]["name"]
    desired = desired_nodepool_state(windows, now, name)
    current, saved = current_fields(pool), saved_fields(pool)
    target, keep = target_fields(desired, current, saved)
    changes = [PoolChange(name, f, was, to, desired.reason) for f, was, to in _differences(current, target)]
    same_saved = (saved.as_json() if saved else None) == (keep.as_json() if keep else None)
    if not changes and same_saved:
        return [], None, desired.reason
    return changes, _patch(current, target, keep), desired.reason


def reconcile_nodepool(deps: Deps, pool: dict[str, Any], now: datetime) -> list[PoolChange]:
    """Write what the windows want on one NodePool (RV-checked; re-read and re-decided on a conflict)."""
    name = pool["metadata"]["name"]
    for _ in range(_MAX_CONFLICTS):
        changes, patch, reason = _plan(pool, deps.policy.windows, now)
        if patch is None:
            return []
        try:
            written = deps.kube.patch_nodepool(name, patch, pool["metadata"].get("resourceVersion"))
        except Conflict:
            fresh = deps.kube.get_nodepool(name)
            if fresh is None:
                return []
            pool = fresh
            continue
        saved = ((written.get("metadata") or {}).get("annotations") or {}).get(ann.SAVED_BUDGETS)
        if not deps.dry_run:
            entry = {"saved_budgets": saved or "", "reason": reason, "at": now.isoformat()}
            deps.ledger.record(f"nodepool#{name}", entry)
        return changes
    raise KubeError(f"NodePool {name}: {_MAX_CONFLICTS} write conflicts in a row", status=409)


def _scope(tick: WindowTick, deps: Deps) -> tuple[Window | None, str | None]:
    """The window an open/close tick names, or the reason to ignore the tick."""
    if tick.window is None:
        return None, None
    window = next((w for w in deps.policy.windows if w.name == tick.window), None)
    if window is None:
        return None, f"window {tick.window!r} is not in the policy (a schedule of an older policy?): nothing done"
    return window, None


def _show(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, sort_keys=True)


def handle_window_tick(tick: WindowTick, deps: Deps, *, drain_locally: bool = True) -> Result:
    """One Scheduler tick: open / close / reconcile keep NodePools in step; maintenance-due runs a plan."""
    if tick.action == "maintenance-due":
        from gpuwarden.services.maintenance import run_plan

        assert tick.plan_id is not None  # the model requires it for maintenance-due
        return run_plan(tick.plan_id, deps, drain_locally=drain_locally)
    now = deps.window_clock()
    window, ignored = _scope(tick, deps)
    label = f"{tick.action} {tick.window!r}" if tick.window else tick.action
    if ignored is not None:
        return Result(outcome="ignored", kind=KIND, reason=ignored)
    pools = deps.kube.list_nodepools()
    if window is not None and window.nodepools is not None:
        pools = [p for p in pools if p["metadata"]["name"] in window.nodepools]
    recorder = Recorder(deps, f"{KIND}-{tick.action}-{ann.rfc3339(now)}")
    changes = [change for pool in pools for change in reconcile_nodepool(deps, pool, now)]
    drift = tick.action == "reconcile"
    for c in changes:
        kind = "nodepool-drift" if drift else "nodepool-set"
        recorder.add(kind, nodepool=c.nodepool, field=c.field, was=c.was, now=c.now, reason=c.reason)
        if drift:
            logger.warning(
                f"drift: NodePool {c.nodepool} {c.field} was {_show(c.was)}, now {_show(c.now)}",
                extra={"nodepool": c.nodepool, "field": c.field, "was": c.was, "now": c.now},
            )
    written = "; ".join(f"{c.nodepool} {c.field} {_show(c.was)} → {_show(c.now)}" for c in changes)
    what = ("drift repaired: " if drift else "written: ") + written if changes else "every NodePool in step"
    reason = f"{label} at {ann.rfc3339(now)}: {len(pools)} NodePool(s) checked, {what}"
    return Result(
        outcome="dry-run" if deps.dry_run else "handled",
        kind=KIND,
        event_id=recorder.event_id,
        reason=reason,
        actions=recorder.actions,
    )
