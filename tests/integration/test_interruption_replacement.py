"""Replacement capacity for interrupted nodes: an Auto Scaling group, MaxSize, and never twice."""

from __future__ import annotations

from typing import Any

import boto3

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.builders import gpu_node, inference_pod
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import spot_node

GROUP = "gpu-nodegroup"
ASG_NODE = "ip-10-0-3-7.us-west-2.compute.internal"


def asg_instance(max_size: int) -> str:
    """A launch template and an Auto Scaling group with desired 1 in moto: the group's instance id."""
    ec2 = boto3.client("ec2", region_name="us-west-2")
    ec2.create_launch_template(
        LaunchTemplateName="gpu-nodes", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.12xlarge"}
    )
    autoscaling = boto3.client("autoscaling", region_name="us-west-2")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        LaunchTemplate={"LaunchTemplateName": "gpu-nodes", "Version": "$Default"},
        MinSize=0,
        MaxSize=max_size,
        DesiredCapacity=1,
        AvailabilityZones=["us-west-2a"],
    )
    return str(group()["Instances"][0]["InstanceId"])


def group() -> dict[str, Any]:
    autoscaling = boto3.client("autoscaling", region_name="us-west-2")
    found: dict[str, Any] = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[GROUP])[
        "AutoScalingGroups"
    ][0]
    return found


def asg_node(world: World, instance_id: str) -> None:
    """A managed-node-group GPU node (no NodePool label) on that instance, running one inference pod."""
    node = world.sim.create(
        gpu_node(ASG_NODE, instance_id, nodepool=None, instance_type="g5.12xlarge", capacity_type="on-demand")
    )
    world.sim.create(inference_pod("inference-asg", node, grace=2))


def test_auto_scaling_group_node_raises_desired_capacity_once_even_after_a_redelivery(world: World) -> None:
    # Given a node of an Auto Scaling group at desired 1, max 3
    instance_id = asg_instance(max_size=3)
    asg_node(world, instance_id)
    event = spot_warning(world, instance_id)
    # When the Spot warning for its instance arrives twice
    first = handle_batch(parse_notices(event), world.deps()).to_json()
    second = handle_batch(parse_notices(event), world.deps()).to_json()
    # Then the group's desired capacity went up by exactly one, recorded on the node
    assert first["outcome"] == "handled", first["reason"]
    assert second["outcome"] == "duplicate", second["reason"]
    assert group()["DesiredCapacity"] == 2
    replacement = next(a for a in first["actions"] if a["type"] == "replacement")
    assert replacement["strategy"] == "asg"
    assert world.node(ASG_NODE)["metadata"]["annotations"]["gpuwarden.io/replacement"] == f"asg/{GROUP}"
    assert world.sim.list("NodeClaim") == []


def test_auto_scaling_group_at_max_size_records_the_failure_and_still_drains(world: World) -> None:
    # Given a node of an Auto Scaling group already at its MaxSize (1)
    instance_id = asg_instance(max_size=1)
    asg_node(world, instance_id)
    # When the Spot warning arrives
    result = handle_batch(parse_notices(spot_warning(world, instance_id)), world.deps()).to_json()
    # Then the failed replacement is recorded (action + Warning Event), the group is untouched,
    # and the node is drained all the same
    assert result["outcome"] == "handled", result["reason"]
    failed = next(a for a in result["actions"] if a["type"] == "replacement-failed")
    assert "MaxSize" in failed["reason"]
    assert group()["DesiredCapacity"] == 1
    assert result["drain"]["outcome"] == "drained"
    assert world.sim.get("Pod", "inference-asg", "serving") is None
    assert "gpuwarden.io/replacement" not in world.node(ASG_NODE)["metadata"]["annotations"]
    warnings = [e for e in world.sim.list("Event") if e["reason"] == "ReplacementFailed"]
    assert [e["type"] for e in warnings] == ["Warning"]


def test_spot_warning_after_a_rebalance_launches_no_second_replacement(world: World) -> None:
    # Given a node already prepared for a rebalance recommendation (its replacement launched)
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None, grace=2)
    now = rfc3339(world.sim.clock.now())
    rebalance = handle_batch(parse_notices(load_event("rebalance-recommendation.json", time=now)), world.deps())
    assert rebalance.outcome == "handled", rebalance.reason
    launched = world.node(scenario.node)["metadata"]["annotations"]["gpuwarden.io/replacement"]
    # When the Spot warning for the same instance follows
    spot = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    result = handle_batch(parse_notices(spot), world.deps()).to_json()
    # Then the spot warning takes the node over and drains it, but finds the replacement and launches none
    assert result["outcome"] == "handled", result["reason"]
    assert "replacement" not in [a["type"] for a in result["actions"]]
    skipped = next(a for a in result["actions"] if a["type"] == "replacement-skipped")
    assert launched in skipped["reason"]
    assert len(world.sim.list("NodeClaim")) == 1
    assert world.node(scenario.node)["metadata"]["annotations"]["gpuwarden.io/kind"] == "spot-interruption"
    assert result["drain"]["outcome"] == "drained"
