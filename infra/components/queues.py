"""Dead-letter queues: encrypted (components/encryption.py), TLS-only, two weeks of retention, an alarm on each."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.components.alarms import AlarmSink
from infra.components.encryption import acknowledge_aws_keys, queue_encryption


class DeadLetterQueue(Construct):
    """An SQS queue that receives what could not be processed, alarmed when non-empty."""

    def __init__(self, scope: Construct, construct_id: str, *, purpose: str, alarms: AlarmSink) -> None:
        super().__init__(scope, construct_id)
        self.queue = sqs.Queue(
            self,
            "Queue",
            enforce_ssl=True,
            retention_period=Duration.days(14),
            **queue_encryption(self),
        )
        acknowledge_aws_keys(self.queue)
        Validations.of(self.queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason=(
                    "This queue is itself a dead-letter queue (an EventBridge target DLQ or a Lambda "
                    "on-failure destination); those links are not RedrivePolicy, so cdk-nag cannot see them."
                ),
            )
        )
        self.alarm = cloudwatch.Alarm(
            self,
            "NotEmpty",
            alarm_description=f"gpuwarden dead letters: {purpose}. Inspect the messages, fix, then redrive.",
            metric=self.queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarms.notify(self.alarm)
