"""The one gpuwarden stack: functions, rules, drain workflow, state table, policy, DLQs, alarms."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, ArnFormat, CfnOutput, Stack, Validations
from constructs import Construct

from infra.components import event_rules, functions
from infra.components.alarms import AlarmSink
from infra.components.drain_workflow import DrainWorkflow
from infra.components.event_rules import EventRoutes
from infra.components.functions import Functions
from infra.components.policy_parameter import PolicyParameter
from infra.components.runtime_layer import RuntimeLayer
from infra.components.state_table import StateTable
from infra.config import Settings

DRAIN_STATE_MACHINE_ENV = "GPUWARDEN_DRAIN_STATE_MACHINE_ARN"


class GpuwardenStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings
        # `cdk ls` / `cdk destroy` ask for no bundling (aws:cdk:bundling-stacks): then the layer is not
        # built either, so those commands work without a wheel cache
        skip_bundling = settings.skip_bundling or not self.bundling_required
        alarms = AlarmSink(self, "Alarms", topic_arn=settings.alarm_topic_arn)
        self.state = StateTable(self, "State")
        self.policy = PolicyParameter(self, "Policy", policy_json=settings.policy_json)
        self.layer = RuntimeLayer(
            self,
            "RuntimeLayer",
            architecture=settings.lambda_architecture,
            skip_bundling=skip_bundling,
        )
        self.functions = Functions(
            self,
            "Functions",
            layer=self.layer.layer,
            architecture=settings.lambda_architecture,
            cluster=settings.cluster,
            table=self.state.table,
            policy_parameter=self.policy.parameter,
            alarms=alarms,
            skip_bundling=skip_bundling,
        )

        # --- drain: a Step Functions loop around drain_step
        drain = self.functions.add(functions.DRAIN)
        self.drain = DrainWorkflow(self, "DrainWorkflow", drain_step=drain.function, alarms=alarms)

        # --- EC2 interruption, rebalance and state-change events
        interruption = self.functions.add(functions.INTERRUPTION)
        interruption.function.add_environment(DRAIN_STATE_MACHINE_ENV, self.drain.state_machine.state_machine_arn)
        self.drain.state_machine.grant_start_execution(interruption.role)
        self._allow_replacement(interruption)
        self.routes = EventRoutes(self, "Events", alarms=alarms)
        for rule in event_rules.EC2_RULES:
            self.routes.route(rule, interruption.function)

        # Later issues, one line each (plus their rule / schedule):
        #   self.functions.add(functions.GPU_IDLE)   # likewise MAINTENANCE, WINDOWS, RUNBOOK

        self.alarms = alarms
        for name, fn in self.functions.by_name.items():
            CfnOutput(self, f"{name}FunctionName", value=fn.function.function_name)
            CfnOutput(self, f"{name}RoleArn", value=fn.role.role_arn, description="map to a Kubernetes identity")
        CfnOutput(self, "DrainStateMachineArn", value=self.drain.state_machine.state_machine_arn)
        CfnOutput(self, "StateTableName", value=self.state.table.table_name)
        CfnOutput(self, "PolicyParameterName", value=self.policy.parameter.parameter_name)

    def _allow_replacement(self, fn: functions.GpuwardenFunction) -> None:
        """Resolve instance → node and launch ASG replacements (CONTRACT.md §2)."""
        fn.allow(
            "DescribeCapacity",
            [
                "ec2:DescribeInstances",
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
            ],
            ["*"],
        )
        asg_arn = self.format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name="*:autoScalingGroupName/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        # only groups of this cluster: EKS managed node groups carry eks:cluster-name,
        # self-managed ones kubernetes.io/cluster/<name>=owned
        cluster = self.settings.cluster
        fn.allow(
            "ScaleManagedNodeGroups",
            ["autoscaling:SetDesiredCapacity"],
            [asg_arn],
            StringEquals={"aws:ResourceTag/eks:cluster-name": cluster},
        )
        fn.allow(
            "ScaleSelfManagedNodeGroups",
            ["autoscaling:SetDesiredCapacity"],
            [asg_arn],
            StringEquals={f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"},
        )
        Validations.of(fn.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:"
                "<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/*]",
                reason=(
                    "SetDesiredCapacity on any Auto Scaling group, but only where the group is tagged as a "
                    f"node group of cluster {cluster} (aws:ResourceTag condition); group names are not "
                    "known at deploy time."
                ),
            )
        )
