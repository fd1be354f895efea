"""EventBridge rules: one spec per event shape; ``EventRoutes.route(SPEC, fn)`` wires one up.

Every rule target retries (2 attempts, 1 h max age) and has a dead-letter queue for events
EventBridge could not deliver; the function's own async retries and on-failure queue are set
in functions.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.components.alarms import AlarmSink
from infra.components.queues import DeadLetterQueue

TARGET_RETRY_ATTEMPTS = 2
TARGET_MAX_EVENT_AGE = Duration.hours(1)

#: EC2 states after which the instance is gone or going (CONTRACT.md §1, `instance-stopping`)
STOPPING_STATES = ("stopping", "stopped", "shutting-down", "terminated")


@dataclass(frozen=True)
class RuleSpec:
    name: str  # construct id
    description: str
    source: str
    detail_type: str
    detail: dict[str, Any] = field(default_factory=dict)

    def pattern(self) -> events.EventPattern:
        return events.EventPattern(
            source=[self.source],
            detail_type=[self.detail_type],
            detail=self.detail or None,
        )


SPOT_INTERRUPTION = RuleSpec(
    "SpotInterruption",
    "EC2 Spot two-minute interruption warnings",
    "aws.ec2",
    "EC2 Spot Instance Interruption Warning",
)
REBALANCE = RuleSpec(
    "Rebalance",
    "EC2 instance rebalance recommendations",
    "aws.ec2",
    "EC2 Instance Rebalance Recommendation",
)
INSTANCE_STOPPING = RuleSpec(
    "InstanceStopping",
    "EC2 instances stopping or terminating",
    "aws.ec2",
    "EC2 Instance State-change Notification",
    {"state": list(STOPPING_STATES)},
)
EC2_RULES = (SPOT_INTERRUPTION, REBALANCE, INSTANCE_STOPPING)
SCHEDULED_MAINTENANCE = RuleSpec(
    "ScheduledMaintenance",
    "AWS Health scheduled changes to EC2 instances (retirement, maintenance)",
    "aws.health",
    "AWS Health Event",
    {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
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

    def route(self, spec: RuleSpec, function: lambda_.IFunction) -> events.Rule:
        rule = events.Rule(
            self,
            spec.name,
            description=f"gpuwarden: {spec.description}",
            event_pattern=spec.pattern(),
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
