"""AWS permissions for replacing and retiring capacity, least privilege.

Every write is limited to this cluster's resources by tag: EKS managed node groups (their
groups and instances) carry ``eks:cluster-name=<cluster>``; self-managed groups and Karpenter
nodes carry ``kubernetes.io/cluster/<cluster>=owned``. One statement per tag (either may match).
Describe* actions have no resource-level permissions (Resource "*", read-only).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, ArnFormat, Stack, Validations

from infra.components.functions import GpuwardenFunction


def cluster_tags(cluster: str) -> dict[str, dict[str, str]]:
    """Statement sid suffix → StringEquals condition on the resource's tag."""
    return {
        "ManagedNodeGroups": {"aws:ResourceTag/eks:cluster-name": cluster},
        "OwnedByCluster": {f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"},
    }


def _asg_arn(stack: Stack) -> str:
    return stack.format_arn(
        service="autoscaling",
        resource="autoScalingGroup",
        resource_name="*:autoScalingGroupName/*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def _ec2_arn(stack: Stack, resource: str, name: str = "*", *, account: bool = True) -> str:
    return stack.format_arn(service="ec2", resource=resource, resource_name=name, account=None if account else "")


def _ack(fn: GpuwardenFunction, resource: str, reason: str) -> None:
    Validations.of(fn.role).acknowledge(
        Acknowledgment(id=f"AwsSolutions::AwsSolutions-IAM5[Resource::{resource}]", reason=reason)
    )


ASG_NAG = "arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:autoScalingGroupName/*"
INSTANCE_NAG = "arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:instance/*"


def describe_capacity(fn: GpuwardenFunction) -> None:
    """Resolve instance → node and read Auto Scaling groups (read-only, no resource-level permissions)."""
    fn.allow(
        "DescribeCapacity",
        ["ec2:DescribeInstances", "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances"],
        ["*"],
    )


def describe_capacity_blocks(fn: GpuwardenFunction) -> None:
    """Read Capacity Reservations: a Capacity Block's end date and type (read-only; DescribeCapacityReservations
    has no resource-level permissions). Instances' reservations come from ec2:DescribeInstances."""
    fn.allow("DescribeCapacityBlocks", ["ec2:DescribeCapacityReservations"], ["*"])


def scale_node_groups(fn: GpuwardenFunction, cluster: str) -> None:
    """+1 desired capacity on this cluster's node groups (docs/cluster.md, Auto Scaling replacement)."""
    for suffix, tag in cluster_tags(cluster).items():
        fn.allow(f"Scale{suffix}", ["autoscaling:SetDesiredCapacity"], [_asg_arn(Stack.of(fn))], StringEquals=tag)
    _ack(
        fn,
        ASG_NAG,
        f"Auto Scaling writes on any group, but only where the group is tagged as a node group of cluster "
        f"{cluster} (aws:ResourceTag condition); group names are not known at deploy time.",
    )


def retire_instances(fn: GpuwardenFunction, cluster: str) -> None:
    """Terminate this cluster's instances (in their Auto Scaling group, or directly)."""
    stack = Stack.of(fn)
    for suffix, tag in cluster_tags(cluster).items():
        fn.allow(
            f"TerminateInGroup{suffix}",
            ["autoscaling:TerminateInstanceInAutoScalingGroup"],
            [_asg_arn(stack)],
            StringEquals=tag,
        )
        fn.allow(f"Terminate{suffix}", ["ec2:TerminateInstances"], [_ec2_arn(stack, "instance")], StringEquals=tag)
    reason = (
        f"Terminates only instances / Auto Scaling groups tagged as cluster {cluster}'s "
        "(aws:ResourceTag condition); which instance is only known when an event names it."
    )
    _ack(fn, ASG_NAG, reason)
    _ack(fn, INSTANCE_NAG, reason)


#: what EC2 Fleet (instant) creates or uses through RunInstances
_FLEET_RESOURCES = ("instance", "volume", "network-interface", "spot-instances-request", "subnet", "security-group")


def launch_fleet(fn: GpuwardenFunction, cluster: str, template: str, fleet_role_arn: str) -> None:
    """EC2 Fleet (instant) from the policy's launch template, which must be tagged as the cluster's."""
    stack = Stack.of(fn)
    template_arn = _ec2_arn(stack, "launch-template", template if template.startswith("lt-") else "*")
    fn.allow(
        "FleetFromClusterLaunchTemplate",
        ["ec2:CreateFleet", "ec2:RunInstances"],
        [template_arn],
        StringEquals={f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"},
    )
    fn.allow("FleetCreate", ["ec2:CreateFleet"], [_ec2_arn(stack, "fleet")])
    fn.allow(
        "FleetRunFromThatTemplate",
        ["ec2:RunInstances"],
        [_ec2_arn(stack, r) for r in _FLEET_RESOURCES]
        + [_ec2_arn(stack, "image", account=False), _ec2_arn(stack, "key-pair")],
        ArnLike={"ec2:LaunchTemplate": template_arn},
    )
    fn.allow(
        "FleetTagOnLaunch",
        ["ec2:CreateTags"],
        [_ec2_arn(stack, r) for r in ("fleet", "instance", "volume", "network-interface", "spot-instances-request")],
        StringEquals={"ec2:CreateAction": ["CreateFleet", "RunInstances"]},
    )
    if fleet_role_arn:
        fn.allow(
            "PassFleetRole",
            ["iam:PassRole"],
            [fleet_role_arn],
            StringEquals={"iam:PassedToService": "ec2.amazonaws.com"},
        )
    reason = (
        "EC2 Fleet launches new resources whose ids are not known before the call: RunInstances only "
        "from the policy's launch template (ec2:LaunchTemplate condition), tags only at creation "
        "(ec2:CreateAction), the template itself must carry the cluster's tag."
    )
    nag_prefix = "arn:<AWS::Partition>:ec2:<AWS::Region>:"
    for resource in (*_FLEET_RESOURCES, "fleet", "key-pair", "launch-template"):
        if resource == "launch-template" and template.startswith("lt-"):
            continue
        _ack(fn, f"{nag_prefix}<AWS::AccountId>:{resource}/*", reason)
    _ack(fn, f"{nag_prefix}:image/*", reason)
