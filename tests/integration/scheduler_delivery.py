"""EventBridge Scheduler delivering gpuwarden's one-time schedules, as it does deployed: at the time
a schedule's own ``at(...)`` expression names (in its ``ScheduleExpressionTimezone``), its
``Target.Input`` is the event of the function its ``Target.Arn`` names, and a schedule with
``ActionAfterCompletion: DELETE`` is gone afterwards. moto stores the schedules and runs none of
them; this reads them back from moto and does what the service would, nothing more. The time is
parsed here from the expression, not taken from gpuwarden's own code: a schedule written for the
wrong instant is delivered at the wrong instant."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

#: what a target does with the event it is given (a deployed handler, called as Lambda calls it)
Target = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Delivery:
    name: str
    at: datetime
    target: str
    event: dict[str, Any]
    answer: dict[str, Any]


def at_of(expression: str, timezone: str) -> datetime:
    """The instant of a one-time schedule's ``at(yyyy-mm-ddThh:mm:ss)`` in ``timezone``."""
    if not (expression.startswith("at(") and expression.endswith(")")):
        raise ValueError(f"not a one-time schedule: {expression}")
    return datetime.strptime(expression[3:-1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=ZoneInfo(timezone))


def schedules_of(client: Any, group: str) -> list[dict[str, Any]]:
    """Every schedule of ``group``, in full (GetSchedule), earliest first."""
    names = [
        s["Name"]
        for page in client.get_paginator("list_schedules").paginate(GroupName=group)
        for s in page["Schedules"]
    ]
    found = [client.get_schedule(Name=name, GroupName=group) for name in names]
    return sorted(found, key=lambda s: at_of(s["ScheduleExpression"], s.get("ScheduleExpressionTimezone", "UTC")))


def deliver_due(client: Any, group: str, now: datetime, targets: Mapping[str, Target]) -> list[Delivery]:
    """Deliver every enabled schedule of ``group`` whose time has come by ``now``, earliest first. A
    schedule aimed at a function ``targets`` does not name fails (KeyError): gpuwarden's schedules
    invoke only functions of its stack."""
    delivered = []
    for schedule in schedules_of(client, group):
        at = at_of(schedule["ScheduleExpression"], schedule.get("ScheduleExpressionTimezone", "UTC"))
        if schedule.get("State", "ENABLED") != "ENABLED" or at > now:
            continue
        target = schedule["Target"]
        event = json.loads(target["Input"])
        answer = targets[target["Arn"]](event)
        if schedule.get("ActionAfterCompletion") == "DELETE":
            client.delete_schedule(Name=schedule["Name"], GroupName=group)
        delivered.append(Delivery(schedule["Name"], at, target["Arn"], event, answer))
    return delivered
