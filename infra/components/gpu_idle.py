"""GPU-idle reclaim: the fleet-wide Metrics Insights alarm, its EventBridge rules and the function's IAM.

The alarm is a multi-time-series Metrics Insights alarm: one contributor per node (GROUP BY
InstanceId, NodeName), each going to ALARM on its own, so one alarm covers a fleet that grows
and shrinks. EventBridge carries each contributor's state change to the GpuIdle function.

Users' own per-node alarms reach gpuwarden too when their names start with a prefix listed in
the CDK context ``gpuIdleAlarmPrefixes`` (e.g. ``-c gpuIdleAlarmPrefixes='["team-a-gpu-idle"]'``);
the alarm must watch ``node_gpu_utilization`` with an ``InstanceId`` or ``NodeName`` dimension.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Acknowledgment, ArnFormat, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from gpuwarden.sources.rules import DEFAULT_ALARM_PREFIX, Rule
from infra.components.event_rules import EventRoutes, kind_rules
from infra.components.functions import GpuwardenFunction

#: gpuwarden's own alarms start with this; the rules match it plus the users' prefixes.
ALARM_PREFIX = DEFAULT_ALARM_PREFIX
PREFIXES_CONTEXT = "gpuIdleAlarmPrefixes"
#: The functions apply the same filters (gpuwarden.kinds.registry.rules) with these prefixes.
PREFIXES_ENV = "GPUWARDEN_GPU_IDLE_ALARM_PREFIXES"

GET_METRIC_DATA_REASON = (
    "cloudwatch:GetMetricData has no resource-level permissions (AWS service authorization reference): "
    "the GPU-idle re-check reads node_gpu_utilization at action time; X-Ray and ec2/autoscaling Describe* "
    "likewise have none."
)


def idle_query(cluster: str) -> str:
    """Per-node average GPU utilization of the cluster; ORDER BY keeps the idlest within the 500-series cap."""
    # not SQL: a CloudWatch Metrics Insights query; the cluster name is validated by infra.config (EKS name rules)
    return (
        "SELECT AVG(node_gpu_utilization) FROM SCHEMA(ContainerInsights, ClusterName, InstanceId, NodeName) "  # noqa: S608
        f"WHERE ClusterName = '{cluster}' GROUP BY InstanceId, NodeName ORDER BY AVG() ASC"
    )


def alarm_prefixes(scope: Construct) -> list[str]:
    value: Any = scope.node.try_get_context(PREFIXES_CONTEXT)
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [p for p in value.split(",") if p]
    extra = [str(p).strip() for p in value or [] if str(p).strip()]
    return [ALARM_PREFIX, *[p for p in extra if p != ALARM_PREFIX]]


def rule_specs(prefixes: list[str]) -> tuple[Rule, ...]:
    """The GPU function's rules (the gpu-idle kind's alarm and contributor rules: ALARM, and a GPU
    metric, a Metrics Insights query over one, or a name with one of ``prefixes``)."""
    return kind_rules("gpu_signals", prefixes=prefixes)


class GpuIdleReclaim(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fn: GpuwardenFunction,
        routes: EventRoutes,
        cluster: str,
        policy: GpuIdlePolicy,
        drain: sfn.IStateMachine,
        drain_env: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.policy = policy
        fn.function.add_environment(drain_env, drain.state_machine_arn)
        drain.grant_start_execution(fn.role)
        self._permissions(fn, cluster)
        prefixes = alarm_prefixes(self)
        fn.function.add_environment(PREFIXES_ENV, ",".join(prefixes))
        self.rules = [routes.route(spec, fn.function) for spec in rule_specs(prefixes)]
        period = self.policy.period_seconds
        periods = max(1, self.policy.evaluation_minutes * 60 // period)
        self.alarm = cloudwatch.CfnAlarm(
            self,
            "FleetAlarm",
            alarm_name=f"{ALARM_PREFIX}-{cluster}",
            alarm_description=(
                f"gpuwarden: GPU utilization below {self.policy.threshold_percent:g} % for "
                f"{self.policy.evaluation_minutes} min, per node of cluster {cluster} (one contributor per node)"
            ),
            metrics=[
                cloudwatch.CfnAlarm.MetricDataQueryProperty(
                    id="idle", expression=idle_query(cluster), period=period, return_data=True
                )
            ],
            comparison_operator="LessThanThreshold",
            threshold=self.policy.threshold_percent,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            treat_missing_data="notBreaching",
        )

    def _permissions(self, fn: GpuwardenFunction, cluster: str) -> None:
        fn.allow("GpuIdleRecheck", ["cloudwatch:GetMetricData"], ["*"])
        fn.allow("GpuIdleDescribe", ["ec2:DescribeInstances"], ["*"])
        asg_arn = Stack.of(self).format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name="*:autoScalingGroupName/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        action = ["autoscaling:TerminateInstanceInAutoScalingGroup"]
        fn.allow(
            "RetireManagedNodeGroupMembers",
            action,
            [asg_arn],
            StringEquals={"aws:ResourceTag/eks:cluster-name": cluster},
        )
        fn.allow(
            "RetireSelfManagedNodeGroupMembers",
            action,
            [asg_arn],
            StringEquals={f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"},
        )
        Validations.of(fn.role).acknowledge(
            Acknowledgment(id="AwsSolutions::AwsSolutions-IAM5[Resource::*]", reason=GET_METRIC_DATA_REASON)
        )
        Validations.of(fn.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:"
                "<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/*]",
                reason=(
                    "TerminateInstanceInAutoScalingGroup on any Auto Scaling group, but only where the group is "
                    f"tagged as a node group of cluster {cluster} (aws:ResourceTag condition); group names are "
                    "not known at deploy time."
                ),
            )
        )
