"""`scheduled-maintenance`: AWS Health schedules a change to an EC2 instance (docs/events.md)."""

from gpuwarden.domain.decide import drain_with
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.scheduled_maintenance import policy
from gpuwarden.kinds.scheduled_maintenance import use_case as maintenance
from gpuwarden.kinds.spec import KindSpec, plan_due
from gpuwarden.services.engine.hooks import Admission, KindHooks, Settlement
from gpuwarden.sources.health import HealthEvent, why_not_scheduled_change
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.SCHEDULED_MAINTENANCE,
    summary="AWS Health scheduled a change (retirement, maintenance) to an EC2 instance",
    voluntary=True,  # until its deadline: then the drain runs whatever the windows say
    route="planning",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(
            plan=drain_with("scheduled maintenance"),  # for the reason the use case gives: a window, or no time left
            guard=maintenance.no_do_not_disrupt,
            stopped=maintenance.refused,
        ),
        settlement=Settlement(answer=maintenance.drained),
    ),
    handle=maintenance.handle_maintenance,
    switch="maintenance.enabled",
    policy=policy.SECTION,
    models=(HealthEvent,),
    rules=lambda _: (
        rule_of(
            "ScheduledMaintenance",
            "AWS Health scheduled changes to EC2 instances (retirement, maintenance)",
            HealthEvent,
            detail={"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
        ),
    ),
    why_ignored=why_not_scheduled_change,
    samples=(
        "health-scheduled-maintenance.json",
        "health-scheduled-change-karpenter.json",
        "health-scheduled-change-nth.json",
    ),
    ticks={"maintenance-due": plan_due(maintenance.run_plan)},  # the windows are asked again, then the drain
)
