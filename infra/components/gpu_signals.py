"""GPU signals (docs/gpu-signals.md): the GPU-health scan's every-minute schedule and the SNS topic
Alertmanager publishes to, both delivered to the GPU function.

- The topic is encrypted with its own key (a service principal cannot use the AWS-managed SNS
  key), TLS-only, and its policy lets Amazon Managed Service for Prometheus (``aps.amazonaws.com``)
  of this account publish; the GPU function is subscribed.
- The schedule invokes the GPU function with ``{"gpuwarden": "gpu-health-scan", …}``
  (functions/gpuwarden/sources/scan.py) every minute; undelivered ticks go to a dead-letter queue.
- ``gpu_health.enabled: false`` in the policy: no schedule. No ``alerts`` map and the scan off: no topic.
"""

from __future__ import annotations

import json
from typing import cast

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.components.alarms import AlarmSink
from infra.components.functions import GpuwardenFunction
from infra.components.naming import name_prefix
from infra.components.queues import DeadLetterQueue

SCAN_INPUT = json.dumps(
    {
        "gpuwarden": "gpu-health-scan",
        "scheduled_time": "<aws.scheduler.scheduled-time>",
        "execution_id": "<aws.scheduler.execution-id>",
    }
)
APS = "aps.amazonaws.com"


class GpuSignals(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fn: GpuwardenFunction,
        scan: bool,
        topic: bool,
        alarms: AlarmSink,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic: sns.Topic | None = self._topic(fn) if topic else None
        self.schedule: scheduler.CfnSchedule | None = self._schedule(fn, alarms) if scan else None

    def _topic(self, fn: GpuwardenFunction) -> sns.Topic:
        stack = Stack.of(self)
        account = stack.account
        key = kms.Key(
            self,
            "TopicKey",
            description="gpuwarden Alertmanager topic encryption (Amazon Managed Service for Prometheus publishes)",
            enable_key_rotation=True,
        )
        aps = iam.ServicePrincipal(APS)
        from_account = {"StringEquals": {"aws:SourceAccount": account}}
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="PrometheusPublishes",
                principals=[aps],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions=from_account,
            )
        )
        topic = sns.Topic(
            self, "AlertmanagerTopic", display_name="gpuwarden Alertmanager", master_key=key, enforce_ssl=True
        )
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="PrometheusPublishes",
                principals=[aps],
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                resources=[topic.topic_arn],
                conditions=from_account,
            )
        )
        topic.add_subscription(subscriptions.LambdaSubscription(fn.function))
        home = cast(Construct, self.node.scope)  # beside gpuwarden's other outputs (infra/construct.py)
        CfnOutput(home, "AlertmanagerTopicArn", value=topic.topic_arn, description="sns_configs topic_arn")
        return topic

    def _schedule(self, fn: GpuwardenFunction, alarms: AlarmSink) -> scheduler.CfnSchedule:
        dead_letters = DeadLetterQueue(
            self, "UndeliveredScans", purpose="GPU-health scans Scheduler could not deliver", alarms=alarms
        )
        role = iam.Role(
            self,
            "ScanRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            ),
            description="gpuwarden GPU-health scan: invoke the GPU function only",
        )
        role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[fn.function.function_arn]))
        dead_letters.queue.grant_send_messages(role)
        return scheduler.CfnSchedule(
            self,
            "Scan",
            name=f"{name_prefix(self)}-gpu-health-scan"[:64],
            description="gpuwarden GPU-health scan: nodes whose AcceleratedHardwareReady / GPUHealthy is False",
            schedule_expression="rate(1 minute)",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=fn.function.function_arn,
                role_arn=role.role_arn,
                input=SCAN_INPUT,
                # a scan missed is replaced by the next one a minute later
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=0, maximum_event_age_in_seconds=60
                ),
                dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(arn=dead_letters.queue.queue_arn),
            ),
        )
