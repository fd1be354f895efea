"""Optional VPC placement for every function (context ``vpcId``, ``subnetIds``, ``securityGroupIds``).

Needed when the cluster's API endpoint is private, and for the ``http:`` checkpoint mode (a POST
to the pod IP). The subnets must reach the cluster endpoint and the AWS APIs gpuwarden calls
(NAT or VPC endpoints: eks, sts, ssm, dynamodb, ec2, autoscaling, states, logs, monitoring).
No ``Vpc.from_lookup``: the synth stays offline.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Annotations, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.components.acknowledge import checkov_skip
from infra.config import Network

#: fromVpcAttributes wants AZs (a token list draws a warning); they are only used to pick subnets
#: by type, and the subnets here are always given explicitly, so nothing renders this value
UNUSED_AZ = "unused-subnets-are-explicit"
VPC_ACCESS_POLICY = (
    "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
    "AWSLambdaVPCAccessExecutionRole]"
)
VPC_ACCESS_REASON = (
    "Only when placed in a VPC: the AWS-managed AWSLambdaVPCAccessExecutionRole "
    "(ec2:CreateNetworkInterface/DescribeNetworkInterfaces/DeleteNetworkInterface/Assign/UnassignPrivateIpAddresses) "
    "is what Lambda needs to attach the function's ENIs; AWS maintains it."
)

OUTSIDE_VPC_REASON = (
    "Outside a VPC unless context vpcId/subnetIds is set: the function calls only AWS APIs and the EKS cluster "
    "endpoint (public by default), and a VPC without NAT or interface endpoints would cut it off from both. "
    "Set vpcId/subnetIds for a private cluster endpoint or the http: checkpoint mode (README Deploy)."
)


def acknowledge_outside_vpc(function: lambda_.Function, reason: str = OUTSIDE_VPC_REASON) -> None:
    """checkov CKV_AWS_117 (function not in a VPC), for a function deployed without one."""
    checkov_skip(function, "CKV_AWS_117", reason)


class FunctionNetwork(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, network: Network) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=network.vpc_id, availability_zones=[UNUSED_AZ])
        subnets = [ec2.Subnet.from_subnet_id(self, f"Subnet{i}", s) for i, s in enumerate(network.subnet_ids)]
        for subnet in subnets:  # only the subnet id goes into the template; no route table is read
            Annotations.of(subnet).acknowledge_warning(
                "@aws-cdk/aws-ec2:noSubnetRouteTableId", "gpuwarden only places functions in the subnet"
            )
        self.subnets = ec2.SubnetSelection(subnets=subnets)
        self.security_groups: list[ec2.ISecurityGroup]
        if network.security_group_ids:
            self.security_groups = [
                ec2.SecurityGroup.from_security_group_id(self, f"SecurityGroup{i}", g, mutable=False)
                for i, g in enumerate(network.security_group_ids)
            ]
        else:
            created = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=self.vpc,
                description="gpuwarden functions: no ingress; egress to the cluster endpoint, AWS APIs, pods",
                allow_all_outbound=True,
            )
            self.security_groups = [created]

    def function_options(self) -> dict[str, Any]:
        """Keyword arguments for ``lambda_.Function``."""
        return {"vpc": self.vpc, "vpc_subnets": self.subnets, "security_groups": self.security_groups}

    @staticmethod
    def allow_enis(role: iam.IRole) -> None:
        """The ENI permissions Lambda checks at CreateFunction for a VPC function. CDK adds them
        only to roles it creates itself; gpuwarden brings its own roles, so add them here."""
        role.add_managed_policy(
            iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
        )
        Validations.of(role).acknowledge(Acknowledgment(id=VPC_ACCESS_POLICY, reason=VPC_ACCESS_REASON))
