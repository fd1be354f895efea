"""Budget windows on EventBridge Scheduler (docs/windows.md), generated from the policy.

Per window an ``open`` schedule (its 5-field cron turned into Scheduler's 6-field cron, in the
window's time zone) and, where Scheduler can express it, a ``close`` schedule at open time +
duration; plus one ``rate(5 minutes)`` reconcile for every window. Every tick is
level-triggered (the scheduled function computes what is open *now*), so the reconcile is what
guarantees convergence: a window whose schedule has no Scheduler form (a warning at synth
says which), a missed tick, or a close that lands an hour off on a DST night is caught by it
within 5 minutes.

Cron translation. Scheduler's cron is ``minutes hours day-of-month month day-of-week year``
with day-of-week 1-7 = SUN-SAT and a ``?`` in exactly one of the two day fields. The policy's
fields are written out as explicit values (ranges compressed), so steps and names need no
translation. When both day fields are restricted, Vixie cron fires on EITHER: that is two
schedules (``-open-dom`` and ``-open-dow``). When one is restricted through a ``*`` step
(``*/2``) and the other is restricted too, cron wants BOTH: Scheduler cannot say that, and
the window is left to the reconcile.

The close cron: open time + duration as a wall-clock time. Expressible when the window opens
at one minute of one hour and the duration is whole minutes; if the close falls on a later
day, the day fields must be day-of-week only (weekdays shift; days of the month cross month
ends). Otherwise the reconcile closes the window.

One-time maintenance schedules (``at(...)``) are created at run time in this stack's schedule
group by the windows and maintenance functions, which may only create/read schedules in that
group and pass the Scheduler role to scheduler.amazonaws.com.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Acknowledgment, Annotations, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from gpuwarden.domain.windows import CronSchedule, Window
from infra.components.alarms import AlarmSink
from infra.components.functions import GpuwardenFunction
from infra.components.naming import own_name
from infra.components.queues import DeadLetterQueue

RECONCILE_EXPRESSION = "rate(5 minutes)"
RETRY_ATTEMPTS = 5
MAX_EVENT_AGE_SECONDS = 3600
SCHEDULE_GROUP_ENV = "GPUWARDEN_SCHEDULE_GROUP"
WINDOWS_FUNCTION_ENV = "GPUWARDEN_WINDOWS_FUNCTION_ARN"
SCHEDULER_ROLE_ENV = "GPUWARDEN_SCHEDULER_ROLE_ARN"
SCHEDULER_DLQ_ENV = "GPUWARDEN_SCHEDULER_DLQ_ARN"
_CONTEXT = {
    "scheduled_time": "<aws.scheduler.scheduled-time>",
    "schedule_arn": "<aws.scheduler.schedule-arn>",
    "execution_id": "<aws.scheduler.execution-id>",
    "attempt": "<aws.scheduler.attempt-number>",
}
_MINUTES_PER_DAY = 24 * 60
_NAME_MAX = 64


def tick_input(action: str, window: str | None = None) -> str:
    """The target Input: our SchedulerTick JSON (functions/gpuwarden/sources/ticks.py)."""
    tick: dict[str, str] = {"gpuwarden": "budget-window", "action": action}
    if window is not None:
        tick["window"] = window
    return json.dumps(tick | _CONTEXT, sort_keys=True)


def _field(values: Sequence[int], low: int, high: int) -> str:
    """``*`` for every value, else a comma list with runs of 3+ as ranges (``1-5,7``)."""
    if list(values) == list(range(low, high + 1)):
        return "*"
    parts: list[str] = []
    run: list[int] = []
    for value in [*values, None]:
        if value is not None and run and value == run[-1] + 1:
            run.append(value)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)))
        run = [value] if value is not None else []
    return ",".join(parts)


def _weekdays(values: Sequence[int], shift: int = 0) -> str:
    """Cron 0-6 (SUN-SAT) shifted by ``shift`` days → Scheduler 1-7 (SUN-SAT)."""
    return _field(sorted({(v + shift) % 7 + 1 for v in values}), 1, 7)


def _all_days(cron: CronSchedule) -> bool:
    return list(cron.days) == list(range(1, 32))


def _all_weekdays(cron: CronSchedule) -> bool:
    return list(cron.weekdays) == list(range(7))


def _days(cron: CronSchedule) -> list[tuple[str, str]] | None:
    """(day-of-month, day-of-week) pairs, one per Scheduler schedule; None when inexpressible."""
    dom, dow = _field(cron.days, 1, 31), _weekdays(cron.weekdays)
    if cron.days_or_weekdays and not (_all_days(cron) or _all_weekdays(cron)):
        return [(dom, "?"), ("?", dow)]  # either matches: two schedules
    if _all_weekdays(cron):
        return [(dom, "?")]
    if _all_days(cron):
        return [("?", dow)]
    return None  # both must match, one through a '*' step: no Scheduler form


def open_expressions(window: Window) -> list[str]:
    """Scheduler cron expressions that open ``window`` (empty: only the reconcile opens it)."""
    cron = window.cron
    days = _days(cron)
    if days is None:
        return []
    minutes, hours, months = _field(cron.minutes, 0, 59), _field(cron.hours, 0, 23), _field(cron.months, 1, 12)
    return [f"cron({minutes} {hours} {dom} {months} {dow} *)" for dom, dow in days]


def close_expression(window: Window) -> str | None:
    """The Scheduler cron at open time + duration, or None when it has no exact form."""
    cron = window.cron
    seconds = window.duration.total_seconds()
    if len(cron.minutes) != 1 or len(cron.hours) != 1 or seconds % 60:
        return None
    later = cron.hours[0] * 60 + cron.minutes[0] + int(seconds // 60)
    days_later, at = divmod(later, _MINUTES_PER_DAY)
    hour, minute = divmod(at, 60)
    if days_later == 0:
        days = _days(cron)
        if days is None or len(days) != 1:
            return None
        dom, dow = days[0]
        return f"cron({minute} {hour} {dom} {_field(cron.months, 1, 12)} {dow} *)"
    if not (_all_days(cron) and list(cron.months) == list(range(1, 13))) or cron.days_or_weekdays:
        return None
    if _all_weekdays(cron):
        return f"cron({minute} {hour} * * ? *)"
    return f"cron({minute} {hour} ? * {_weekdays(cron.weekdays, days_later)} *)"


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    expression: str
    timezone: str | None
    input: str
    description: str


def schedule_name(window: str, suffix: str) -> str:
    """``<window>-<suffix>``, within Scheduler's 64 characters (a hash keeps long names unique)."""
    name = f"{window}-{suffix}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(window.encode()).hexdigest()[:8]
    return f"{window[: _NAME_MAX - len(suffix) - 10]}-{digest}-{suffix}"


def window_specs(window: Window) -> tuple[list[ScheduleSpec], list[str]]:
    """The schedules of one window, and what is left to the reconcile (for a synth warning)."""
    opens = open_expressions(window)
    specs = [
        ScheduleSpec(
            schedule_name(window.name, "open" if len(opens) == 1 else f"open-{'dom' if i == 0 else 'dow'}"),
            expression,
            window.timezone,
            tick_input("open", window.name),
            f"gpuwarden: open budget window {window.name} ({window.schedule}, {window.timezone})",
        )
        for i, expression in enumerate(opens)
    ]
    left: list[str] = []
    if not opens:
        left.append(f"window {window.name!r}: schedule {window.schedule!r} has no Scheduler cron form")
    close = close_expression(window)
    if close is None:
        left.append(f"window {window.name!r}: its close ({window.schedule} + {window.duration}) has no Scheduler form")
    else:
        specs.append(
            ScheduleSpec(
                schedule_name(window.name, "close"),
                close,
                window.timezone,
                tick_input("close", window.name),
                f"gpuwarden: close budget window {window.name} after {window.duration}",
            )
        )
    return specs, left


def all_specs(windows: Sequence[Window]) -> tuple[list[ScheduleSpec], list[str]]:
    specs = [
        ScheduleSpec(
            "reconcile",
            RECONCILE_EXPRESSION,
            None,
            tick_input("reconcile"),
            "gpuwarden: keep NodePools in step with the budget windows",
        )
    ]
    left: list[str] = []
    for window in windows:
        found, missing = window_specs(window)
        specs += found
        left += missing
    return specs, left


class BudgetWindowSchedules(Construct):
    """The schedule group, the Scheduler role, a DLQ for undelivered ticks, and the schedules."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        windows: Sequence[Window],
        target: GpuwardenFunction,
        planners: Sequence[GpuwardenFunction],
        alarms: AlarmSink,
    ) -> None:
        super().__init__(scope, construct_id)
        self.group = scheduler.CfnScheduleGroup(self, "Group")
        self.dead_letters = DeadLetterQueue(
            self, "UndeliveredTicks", purpose="budget-window ticks Scheduler could not deliver", alarms=alarms
        )
        self.role = iam.Role(
            self,
            "InvokeRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            ),
            description="gpuwarden schedules: invoke the scheduled function only",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[target.function.function_arn])
        )
        self.dead_letters.queue.grant_send_messages(self.role)
        specs, left = all_specs(windows)
        for message in left:
            Annotations.of(self).add_warning_v2(
                "gpuwarden:window-left-to-reconcile", f"{message}: the 5-minute reconcile applies it"
            )
        self.schedules = {spec.name: self._schedule(spec, target) for spec in specs}
        for fn in planners:
            self._allow_planning(fn, target)

    def _schedule(self, spec: ScheduleSpec, target: GpuwardenFunction) -> scheduler.CfnSchedule:
        return scheduler.CfnSchedule(
            self,
            spec.name,
            name=own_name(self, spec.name),
            group_name=self.group.ref,
            description=spec.description,
            schedule_expression=spec.expression,
            schedule_expression_timezone=spec.timezone,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=target.function.function_arn,
                role_arn=self.role.role_arn,
                input=spec.input,
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=RETRY_ATTEMPTS, maximum_event_age_in_seconds=MAX_EVENT_AGE_SECONDS
                ),
                dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(
                    arn=self.dead_letters.queue.queue_arn
                ),
            ),
        )

    def _allow_planning(self, fn: GpuwardenFunction, target: GpuwardenFunction) -> None:
        """One-time maintenance schedules in this group only, passing only the Scheduler role."""
        stack = Stack.of(self)
        schedules = stack.format_arn(service="scheduler", resource="schedule", resource_name=f"{self.group.ref}/*")
        fn.allow("MaintenanceSchedules", ["scheduler:CreateSchedule", "scheduler:GetSchedule"], [schedules])
        fn.allow(
            "PassSchedulerRole",
            ["iam:PassRole"],
            [self.role.role_arn],
            StringEquals={"iam:PassedToService": "scheduler.amazonaws.com"},
        )
        fn.function.add_environment(SCHEDULE_GROUP_ENV, self.group.ref)
        fn.function.add_environment(SCHEDULER_ROLE_ENV, self.role.role_arn)
        fn.function.add_environment(SCHEDULER_DLQ_ENV, self.dead_letters.queue.queue_arn)
        if fn is not target:  # the scheduled function's own ARN would be a cycle: its handler reads it from the context
            fn.function.add_environment(WINDOWS_FUNCTION_ENV, target.function.function_arn)
        Validations.of(fn.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:"
                f"<AWS::AccountId>:schedule/<{stack.get_logical_id(self.group)}>/*]",
                reason=(
                    "Maintenance plans create one-time schedules named after each plan at run time; the "
                    "wildcard is limited to gpuwarden's own schedule group."
                ),
            )
        )
