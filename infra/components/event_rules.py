"""EventBridge rules: built from the kinds' specs (gpuwarden.kinds.registry: each kind's rules, its
switch and the function it goes to; `gpuwarden invoke` applies the same rules);
``EventRoutes.route(rule, fn)`` wires one up.

Every rule target retries (2 attempts, 1 h max age) and has a dead-letter queue for events
EventBridge could not deliver; the function's own async retries and on-failure queue are set
in functions.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from gpuwarden.domain.policy import Policy
from gpuwarden.domain.switches import is_on
from gpuwarden.kinds.registry import routed_rules
from gpuwarden.kinds.spec import Route
from gpuwarden.sources.rules import DEFAULT_ALARM_PREFIX, Rule
from infra.components.alarms import AlarmSink
from infra.components.queues import DeadLetterQueue

TARGET_RETRY_ATTEMPTS = 2
TARGET_MAX_EVENT_AGE = Duration.hours(1)


def pattern_of(rule: Rule) -> events.EventPattern:
    """The CDK form of a rule's pattern (its kind's spec: the one definition, also applied by
    `gpuwarden invoke` and the handlers)."""
    pattern = rule.pattern
    return events.EventPattern(
        source=list(pattern["source"]),
        detail_type=list(pattern["detail-type"]),
        detail=dict(pattern["detail"]) if "detail" in pattern else None,
    )


def kind_rules(
    route: Route, policy: Policy | None = None, prefixes: Sequence[str] = (DEFAULT_ALARM_PREFIX,)
) -> tuple[Rule, ...]:
    """The rules of every kind whose events go to the function ``route``; with a ``policy``, only
    those of the kinds it leaves switched on (a switched-off kind gets no rule)."""
    return tuple(
        rule
        for spec, rule in routed_rules(prefixes)
        if spec.route == route and (policy is None or is_on(policy, spec.switch or ""))
    )


class EventRoutes(Construct):
    """Rules on the default event bus, sharing one target dead-letter queue."""

    def __init__(self, scope: Construct, construct_id: str, *, alarms: AlarmSink) -> None:
        super().__init__(scope, construct_id)
        self.dead_letters = DeadLetterQueue(
            self,
            "UndeliveredEvents",
            purpose="events EventBridge could not deliver to a function",
            alarms=alarms,
        )
        self.rules: dict[str, events.Rule] = {}

    def route(self, spec: Rule, function: lambda_.IFunction) -> events.Rule:
        rule = events.Rule(
            self,
            spec.name,
            description=f"gpuwarden: {spec.description}",
            event_pattern=pattern_of(spec),
        )
        rule.add_target(
            targets.LambdaFunction(
                function,
                retry_attempts=TARGET_RETRY_ATTEMPTS,
                max_event_age=TARGET_MAX_EVENT_AGE,
                dead_letter_queue=self.dead_letters.queue,
            )
        )
        self.rules[spec.name] = rule
        return rule
