"""Where alarms go: an SNS topic, or nowhere (console only).

- context ``alarmTopicArn``: an existing topic (e.g. one AWS Chatbot / Amazon Q Developer in chat
  applications already posts to Slack from);
- context ``alarmEmail`` (without a topic ARN): the stack creates an encrypted topic and
  subscribes the address (with a topic ARN: the address is subscribed to that topic);
- neither: alarms have no action.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct


class AlarmSink(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, topic_arn: str, email: str = "") -> None:
        super().__init__(scope, construct_id)
        self.topic: sns.ITopic | None = None
        if topic_arn:
            self.topic = sns.Topic.from_topic_arn(self, "Topic", topic_arn)
        elif email:
            self.topic = self._create_topic()
        if email and self.topic is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self.alarms: list[cloudwatch.Alarm] = []

    def _create_topic(self) -> sns.Topic:
        """Encrypted with a key CloudWatch may use (alarms cannot publish to a topic under the
        AWS-managed SNS key), TLS-only, publishable by CloudWatch alarms of this account only."""
        account = Stack.of(self).account
        key = kms.Key(
            self,
            "TopicKey",
            description="gpuwarden alarm topic encryption (CloudWatch alarms publish through it)",
            enable_key_rotation=True,
        )
        cloudwatch_principal = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[cloudwatch_principal],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        topic = sns.Topic(
            self,
            "Topic",
            display_name="gpuwarden alarms",
            master_key=key,
            enforce_ssl=True,
        )
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[cloudwatch_principal],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        return topic

    def notify(self, alarm: cloudwatch.Alarm) -> None:
        self.alarms.append(alarm)
        if self.topic is not None:
            alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
            alarm.add_ok_action(cw_actions.SnsAction(self.topic))
