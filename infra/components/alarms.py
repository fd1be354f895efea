"""Where alarms go: an existing SNS topic from context ``alarmTopicArn``, or nowhere (console only)."""

from __future__ import annotations

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct


class AlarmSink(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, topic_arn: str) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic.from_topic_arn(self, "Topic", topic_arn) if topic_arn else None
        self.alarms: list[cloudwatch.Alarm] = []

    def notify(self, alarm: cloudwatch.Alarm) -> None:
        self.alarms.append(alarm)
        if self.topic is not None:
            alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
            alarm.add_ok_action(cw_actions.SnsAction(self.topic))
