"""EventBridge rules: built from the one definition of their patterns (gpuwarden.sources.routing,
which `gpuwarden invoke` applies too); ``EventRoutes.route(RULE, fn)`` wires one up.

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
from gpuwarden.domain.switches import KIND_SWITCHES, is_on
from gpuwarden.sources.routing import DEFAULT_ALARM_PREFIX, KIND_OF, Rule, rules
from infra.components.alarms import AlarmSink
from infra.components.queues import DeadLetterQueue

TARGET_RETRY_ATTEMPTS = 2
TARGET_MAX_EVENT_AGE = Duration.hours(1)


def pattern_of(rule: Rule) -> events.EventPattern:
    """The CDK form of a rule's pattern (gpuwarden.sources.routing: the one definition, also
    applied by `gpuwarden invoke` and the handlers)."""
    pattern = rule.pattern
    return events.EventPattern(
        source=list(pattern["source"]),
        detail_type=list(pattern["detail-type"]),
        detail=dict(pattern["detail"]) if "detail" in pattern else None,
    )


def deployed_rules(prefixes: Sequence[str] = (DEFAULT_ALARM_PREFIX,)) -> dict[str, Rule]:
    """Every rule the stack deploys, by construct id."""
    return {rule.name: rule for rule in rules(prefixes)}


_BY_NAME = deployed_rules()
SPOT_INTERRUPTION = _BY_NAME["SpotInterruption"]
REBALANCE = _BY_NAME["Rebalance"]
INSTANCE_STOPPING = _BY_NAME["InstanceStopping"]
CAPACITY_RESERVATION_INTERRUPTION = _BY_NAME["CapacityReservationInterruption"]
CAPACITY_BLOCK_EXPIRY = _BY_NAME["CapacityBlockExpiry"]
CAPACITY_BLOCK_DELIVERED = _BY_NAME["CapacityBlockDelivered"]
SCHEDULED_MAINTENANCE = _BY_NAME["ScheduledMaintenance"]
#: the rules that target the interruption function
EC2_RULES = tuple(r for r in _BY_NAME.values() if r.route == "interruption")
#: the rules that target the maintenance (planning) function
PLANNING_RULES = tuple(r for r in _BY_NAME.values() if r.route == "maintenance")


def rule_is_on(rule: Rule, policy: Policy) -> bool:
    """A rule whose kind is switched off in the policy is not created (gpuwarden.domain.switches)."""
    return all(is_on(policy, KIND_SWITCHES.get(KIND_OF[t].value, "")) for t in rule.detail_types if t in KIND_OF)


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
