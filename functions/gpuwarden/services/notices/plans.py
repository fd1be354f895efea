"""A plan falling due later (docs/windows.md, "Schedules"): the Scheduler input of its ``-due`` tick, and
the one-time schedule that fires it (or, where there is no Scheduler, the tick to run by hand)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.services.engine.context import Deps, Recorder


def drain_estimate(deps: Deps) -> timedelta:
    """The time a voluntary drain may take (policy ``drain.voluntary_limit_seconds``): how far
    ahead of its deadline a plan starts its drain."""
    return timedelta(seconds=deps.policy.drain.voluntary_limit_seconds)


def due_tick(action: str, plan_id: str) -> dict[str, str]:
    """The Scheduler input that runs the plan ``plan_id`` (the scheduled function, ``action``: a ``-due`` tick)."""
    return {
        "gpuwarden": "budget-window",
        "action": action,
        "plan_id": plan_id,
        "scheduled_time": "<aws.scheduler.scheduled-time>",
        "execution_id": "<aws.scheduler.execution-id>",
        "attempt": "<aws.scheduler.attempt-number>",
    }


def schedule_plan(recorder: Recorder, name: str, at: datetime, tick: dict[str, str], why: str) -> None:
    """One-time schedule ``name`` firing ``tick`` at ``at`` (idempotent by name); a dry run, or a
    local run without a Scheduler, records the tick to run instead."""
    deps = recorder.deps
    if deps.dry_run or deps.scheduler is None:
        local = "dry run" if deps.dry_run else "no Scheduler here (local run): invoke this tick at that time"
        recorder.add(ActionType.SCHEDULE_SKIPPED, target=name, at=ann.rfc3339(at), tick=tick, reason=f"{why}; {local}")
        return
    arn = deps.scheduler.schedule_once(name, at, tick)
    recorder.add(ActionType.SCHEDULED, target=arn, at=ann.rfc3339(at), reason=why)
