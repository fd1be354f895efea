"""GPU-idle reclaim through the real services, against the simulator + moto (CloudWatch, ASG, EC2)."""

from __future__ import annotations

import copy
import hashlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch
from sim.builders import (
    gpu_node,
    inference_pod,
    nodeclaim_for,
    nodepool,
    trainium_node,
)
from tests.integration.conftest import World, load_event, types
from tests.integration.gpu_idle_cluster import (
    CLUSTER,
    IDLE,
    TAINT,
    assert_untouched,
    contributor_event,
    idle_cluster,
    node_events,
    policy,
    put_utilization,
    run,
)
from tests.integration.scenarios import INSTANCE, NODE

# --------------------------------------------------------------------------- reclaim


def test_contributor_alarm_reclaims_the_named_node(world: World) -> None:
    # Given an idle node (by CloudWatch) in a pool of two, with its NodeClaim
    cluster = idle_cluster(world.sim)
    put_utilization(INSTANCE, NODE, IDLE)
    # When the fleet alarm's contributor for that node goes to ALARM
    result = run(world, contributor_event(NODE, INSTANCE))
    # Then the node was cordoned, the opted-in pod asked to checkpoint, drained, and its NodeClaim deleted
    assert result["outcome"] == "handled", result["reason"]
    assert result["node"] == NODE
    seen = types(result)
    assert seen[0] == "cordon"
    assert seen.index("checkpoint-requested") < seen.index("evict") < seen.index("drain-complete")
    assert seen[-1] == "retire"
    assert result["actions"][-1]["target"] == f"nodeclaim/{cluster.claims[NODE]}"
    for pod in cluster.pods[NODE]:
        assert world.pod(pod) is None, pod
    claim = world.sim.get("NodeClaim", cluster.claims[NODE])
    assert claim is None or claim["metadata"].get("deletionTimestamp")  # Karpenter's finalizer takes it from here
    node = world.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert TAINT in node["spec"]["taints"]
    reasons = [e["reason"] for e in node_events(world, NODE)]
    assert {"GpuwardenCordoned", "CheckpointRequested", "PodEvicted", "DrainCompleted", "NodeRetired"} <= set(reasons)
    # and the other node of the pool is left alone
    assert_untouched(world, cluster.nodes[1])
    other_claim = world.sim.get("NodeClaim", cluster.claims[cluster.nodes[1]])
    assert other_claim is not None
    assert other_claim["metadata"].get("deletionTimestamp") is None


def test_a_node_without_an_aws_provider_id_is_rechecked_on_the_series_the_alarm_names(world: World) -> None:
    # Given the idle node with no AWS providerID (Karpenter's KWOK provider writes kwok://<node>)
    idle_cluster(world.sim, trainer=False)
    world.sim.patch_direct("Node", NODE, {"spec": {"providerID": f"kwok://{NODE}"}})
    put_utilization(INSTANCE, NODE, IDLE)
    # When the contributor naming its instance and node goes to ALARM
    result = run(world, contributor_event(NODE, INSTANCE))
    # Then the series of that instance and node is re-checked (idle) and the node reclaimed
    assert result["outcome"] == "handled", result["reason"]
    assert types(result)[-1] == "retire"


def test_an_alarm_pairing_a_node_with_another_instance_finds_no_data_and_skips(world: World) -> None:
    # Given the idle node with no AWS providerID, and its series published under its own instance
    idle_cluster(world.sim, trainer=False)
    world.sim.patch_direct("Node", NODE, {"spec": {"providerID": f"kwok://{NODE}"}})
    put_utilization(INSTANCE, NODE, IDLE)
    # When a contributor names the node with another instance, Then no series confirms it: not idle
    result = run(world, contributor_event(NODE, "i-0123456789abcdef0"))
    assert result["outcome"] == "ignored", result["reason"]
    assert_untouched(world, NODE)


def test_metric_alarm_with_instance_dimension_reclaims_the_node(world: World) -> None:
    # Given the idle node, When a per-node metric alarm (dimensions InstanceId + NodeName) goes to ALARM
    cluster = idle_cluster(world.sim, trainer=False)
    put_utilization(INSTANCE, NODE, IDLE)
    result = run(world, load_event("cloudwatch-alarm-state-change-gpu-idle.json"))
    # Then the node is drained and retired
    assert result["outcome"] == "handled", result["reason"]
    assert result["instance_id"] == INSTANCE
    assert "drain-complete" in types(result)
    claim = world.sim.get("NodeClaim", cluster.claims[NODE])
    assert claim is None or claim["metadata"].get("deletionTimestamp")


def test_dcgm_alarm_is_rechecked_on_its_own_series_and_reclaims_the_node(world: World) -> None:
    # Given the idle node whose DCGM exporter series (the alarm's own metric) is idle
    cluster = idle_cluster(world.sim, trainer=False)
    put_utilization(INSTANCE, NODE, IDLE, namespace="ContainerInsights/Prometheus", metric="DCGM_FI_DEV_GPU_UTIL")
    # When the user's DCGM alarm (no configured name prefix) goes to ALARM
    result = run(world, load_event("cloudwatch-alarm-state-change-dcgm.json"))
    # Then the re-check reads that series, and the node is drained and retired
    assert result["outcome"] == "handled", result["reason"]
    assert "drain-complete" in types(result)
    claim = world.sim.get("NodeClaim", cluster.claims[NODE])
    assert claim is None or claim["metadata"].get("deletionTimestamp")


def test_dcgm_alarm_is_not_confirmed_by_another_metric(world: World) -> None:
    # Given only Container Insights data for the node (idle), none in the DCGM series the alarm watches
    idle_cluster(world.sim, trainer=False)
    put_utilization(INSTANCE, NODE, IDLE)
    # When the DCGM alarm goes to ALARM
    result = run(world, load_event("cloudwatch-alarm-state-change-dcgm.json"))
    # Then nothing is reclaimed, and the reason names the series that had no data
    assert result["outcome"] == "ignored", result
    assert "no DCGM_FI_DEV_GPU_UTIL data in the last 60 min" in result["reason"]
    assert_untouched(world, NODE)


def test_second_delivery_of_the_same_alarm_changes_nothing(world: World) -> None:
    idle_cluster(world.sim, trainer=False)
    put_utilization(INSTANCE, NODE, IDLE)
    event = contributor_event(NODE, INSTANCE)
    first = run(world, event)
    assert first["outcome"] == "handled", first["reason"]
    version = world.node(NODE)["metadata"]["resourceVersion"]
    # When the same event arrives again
    again = run(world, event)
    # Then it is a duplicate and the node was not written again
    assert again["outcome"] == "duplicate", again["reason"]
    assert world.node(NODE)["metadata"]["resourceVersion"] == version
    assert "cordon" not in types(again)


# --------------------------------------------------------------------------- guardrails


@pytest.mark.parametrize("state", ["OK", "INSUFFICIENT_DATA"])
def test_alarm_leaving_alarm_state_is_ignored(world: World, state: str) -> None:
    # Given the idle node, When the alarm goes to OK / INSUFFICIENT_DATA
    idle_cluster(world.sim)
    event = load_event("cloudwatch-alarm-state-change-ok.json")
    event["detail"]["state"]["value"] = state
    result = run(world, event)
    # Then nothing is done, and the reason says why
    assert result["outcome"] == "ignored"
    assert f"state '{state}'" in result["reason"]  # the deployed rule takes ALARM only
    assert result["actions"] == []
    assert_untouched(world, NODE)


def test_do_not_disrupt_pod_keeps_the_node(world: World) -> None:
    # Given an idle node running a pod marked karpenter.sh/do-not-disrupt
    idle_cluster(world.sim, trainer=False)
    world.sim.patch_direct(
        "Pod", "idle-inference-0", {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}, "serving"
    )
    put_utilization(INSTANCE, NODE, IDLE)
    # When the alarm fires
    result = run(world, contributor_event(NODE, INSTANCE))
    # Then the node is skipped, with the reason in the result and a Kubernetes Event
    assert result["outcome"] == "ignored"
    assert result["reason"] == "pod serving/idle-inference-0 carries karpenter.sh/do-not-disrupt"
    assert_untouched(world, NODE)
    refused = [e for e in node_events(world, NODE) if e["reason"] == "DisruptionRefused"]
    assert [e["message"] for e in refused] == [result["reason"]]


def test_node_busy_again_at_action_time_is_skipped(world: World) -> None:
    # Given a node that was idle but whose GPUs are working again
    idle_cluster(world.sim)
    put_utilization(INSTANCE, NODE, [0.0, 0.0, 0.0, 0.0, 1.0, 55.0])
    # When the (late) alarm arrives
    result = run(world, contributor_event(NODE, INSTANCE))
    # Then the re-check stops it
    assert result["outcome"] == "ignored"
    assert result["reason"] == "node is busy again (55.0 %)"
    assert_untouched(world, NODE)


def test_no_utilization_data_is_not_idleness(world: World) -> None:
    idle_cluster(world.sim)
    result = run(world, contributor_event(NODE, INSTANCE))
    assert result["outcome"] == "ignored"
    assert "no node_gpu_utilization data in the last 60 min" in result["reason"]
    assert_untouched(world, NODE)


def test_last_schedulable_node_of_the_pool_is_kept_when_the_policy_asks(world: World) -> None:
    # (contract §4: the default is now 0, so the policy asks for 1 explicitly)
    idle_cluster(world.sim, extra_nodes=0)
    put_utilization(INSTANCE, NODE, IDLE)
    keep_one = POLICY.model_validate({"cluster": CLUSTER, "gpu_idle": {"min_nodes_per_nodepool": 1}})
    result = run(world, contributor_event(NODE, INSTANCE), keep_one)
    assert result["outcome"] == "ignored"
    assert "below gpu_idle.min_nodes_per_nodepool 1" in result["reason"]
    assert_untouched(world, NODE)


def test_the_last_idle_gpu_node_of_a_pool_is_reclaimed_by_default(world: World) -> None:
    # Given the only node of its NodePool, idle, and the default policy (min_nodes_per_nodepool 0),
    # with nothing on it a controller would recreate (that would come back: test_gpu_idle_reschedule.py)
    cluster = idle_cluster(world.sim, extra_nodes=0, trainer=False, inference=False)
    put_utilization(INSTANCE, NODE, IDLE)
    # When the alarm arrives
    result = run(world, contributor_event(NODE, INSTANCE))
    # Then it is reclaimed: Karpenter brings the pool back from zero when pods need it
    assert result["outcome"] == "handled", result["reason"]
    assert types(result)[-1] == "retire"
    claim = world.sim.get("NodeClaim", cluster.claims[NODE])
    assert claim is None or claim["metadata"].get("deletionTimestamp")


def test_a_freeze_is_named_even_when_the_last_of_pool_guard_would_refuse_too(world: World) -> None:
    # Given the last node of its pool, a policy that keeps one per pool, and a freeze open now
    idle_cluster(world.sim, extra_nodes=0)
    put_utilization(INSTANCE, NODE, IDLE)
    freeze = {"name": "freeze", "schedule": "* * * * *", "timezone": "UTC", "duration": "2h", "max_disruptions": 0}
    both = POLICY.model_validate({"cluster": CLUSTER, "windows": [freeze], "gpu_idle": {"min_nodes_per_nodepool": 1}})
    # When the alarm arrives
    result = run(world, contributor_event(NODE, INSTANCE), both)
    # Then the reason is the window the user configured, not the guard
    assert result["outcome"] == "ignored"
    assert "window 'freeze'" in result["reason"]
    assert "min_nodes_per_nodepool" not in result["reason"]
    assert_untouched(world, NODE)


def test_closed_budget_window_refuses_the_reclaim(world: World) -> None:
    idle_cluster(world.sim)
    put_utilization(INSTANCE, NODE, IDLE)
    freeze = {"name": "freeze", "schedule": "* * * * *", "timezone": "UTC", "duration": "2h", "max_disruptions": 0}
    frozen = Policy.model_validate({"cluster": CLUSTER, "windows": [freeze]})
    result = run(world, contributor_event(NODE, INSTANCE), frozen)
    assert result["outcome"] == "ignored"
    assert "freezes voluntary disruption" in result["reason"]
    assert_untouched(world, NODE)


# --------------------------------------------------------------------------- the cap under a burst


def test_hundred_contributors_at_once_reclaim_only_the_capped_number(world: World) -> None:
    # Given 100 idle GPU nodes (a fleet-wide alarm sends one contributor event per node)
    sim = world.sim
    sim.create(nodepool("gpu-inference"))
    fleet: list[tuple[str, str]] = []
    for i in range(100):
        name = f"ip-10-0-{i // 200}-{i % 200 + 10}.us-west-2.compute.internal"
        instance = f"i-0{hashlib.sha256(name.encode()).hexdigest()[:16]}"
        sim.create(nodeclaim_for(sim.create(gpu_node(name, instance, nodepool="gpu-inference"))))
        put_utilization(instance, name, IDLE)
        fleet.append((name, instance))
    events = [contributor_event(name, instance, id=f"burst-{i}") for i, (name, instance) in enumerate(fleet)]
    cap = 3

    def deliver(event: dict[str, Any]) -> dict[str, Any]:
        deps = world.deps(policy(max_nodes_per_evaluation=cap))  # each handler its own dependencies
        return handle_batch(parse_notices(copy.deepcopy(event)), deps).to_json()

    # When all 100 are handled at once by 10 workers
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(deliver, events))
    # Then exactly the cap acted; every other one is ignored with the cap as its reason
    outcomes = Counter(r["outcome"] for r in results)
    assert outcomes == {"handled": cap, "ignored": 100 - cap}, outcomes
    for r in results:
        if r["outcome"] == "ignored":
            assert "at gpu_idle.max_nodes_per_evaluation 3" in r["reason"], r["reason"]
    retired = [n for n, _ in fleet if world.node(n)["spec"].get("unschedulable")]
    assert len(retired) == cap
    released = [n for n, _ in fleet if n not in retired]
    for name in released:
        assert_untouched(world, name)


# --------------------------------------------------------------------------- drain limit, ASG


def test_drain_blocked_by_a_pdb_past_the_limit_gives_the_node_back(world: World) -> None:
    # Given an idle node whose inference pod a PDB never lets go, and a 60 s drain limit (3 s real at 20x)
    idle_cluster(world.sim, trainer=False, guarded=True)
    put_utilization(INSTANCE, NODE, IDLE)
    # When the alarm fires
    result = run(world, contributor_event(NODE, INSTANCE), policy(drain_limit_seconds=60))
    # Then the PDB was never overridden, the node is uncordoned and a DrainBlocked Warning says why
    assert result["outcome"] == "handled", result["reason"]
    assert result["drain"]["outcome"] == "blocked"
    assert "blocked" in result["reason"]
    assert "delete" not in types(result)
    assert "eviction-blocked" in types(result)
    assert types(result)[-1] == "release"
    assert world.pod("serving/idle-inference-0") is not None
    assert_untouched(world, NODE)
    blocked = [e for e in node_events(world, NODE) if e["reason"] == "DrainBlocked"]
    assert len(blocked) == 1
    assert blocked[0]["type"] == "Warning"
    assert "gpu_idle.drain_limit_seconds 60" in blocked[0]["message"]
    assert any(e["reason"] == "GpuwardenUncordoned" for e in node_events(world, NODE))


def test_node_someone_else_cordoned_stays_cordoned_when_given_back(world: World) -> None:
    idle_cluster(world.sim, trainer=False, guarded=True, extra_nodes=2)
    world.sim.patch_direct("Node", NODE, {"spec": {"unschedulable": True}})
    put_utilization(INSTANCE, NODE, IDLE)
    result = run(world, contributor_event(NODE, INSTANCE), policy(drain_limit_seconds=60))
    assert result["drain"]["outcome"] == "blocked"
    node = world.node(NODE)
    assert node["spec"]["unschedulable"] is True  # the operator's cordon is theirs
    assert TAINT not in node["spec"].get("taints", [])


def test_asg_member_is_terminated_in_its_group_with_desired_decremented(world: World) -> None:
    # Given two GPU nodes of a managed node group (no Karpenter), instances from moto's ASG
    ec2 = boto3.client("ec2", region_name="us-west-2")
    asg = boto3.client("autoscaling", region_name="us-west-2")
    ec2.create_launch_template(
        LaunchTemplateName="gpu-ng", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.12xlarge"}
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName="eks-gpu-ng",
        LaunchTemplate={"LaunchTemplateName": "gpu-ng"},
        MinSize=0,
        MaxSize=4,
        DesiredCapacity=2,
        AvailabilityZones=["us-west-2a"],
    )
    instances = [i["InstanceId"] for i in asg.describe_auto_scaling_groups()["AutoScalingGroups"][0]["Instances"]]
    names = [f"ip-10-0-8-{i}.us-west-2.compute.internal" for i in range(2)]
    for name, instance in zip(names, instances, strict=True):
        obj = gpu_node(name, instance, nodepool=None, instance_type="g5.12xlarge", gpus=4)
        obj["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] = "gpu-ng"
        world.sim.create(obj)
    world.sim.create(inference_pod("ng-idle-0", names[0], grace=5))
    put_utilization(instances[0], names[0], IDLE)
    # When the alarm names the first instance
    result = run(world, contributor_event(names[0], instances[0]))
    # Then it is drained and terminated in its group, desired capacity 2 -> 1
    assert result["outcome"] == "handled", result["reason"]
    assert result["actions"][-1]["target"] == "asg/eks-gpu-ng"
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["eks-gpu-ng"])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 1
    assert instances[0] not in [i["InstanceId"] for i in group["Instances"]]
    assert world.pod("serving/ng-idle-0") is None


# --------------------------------------------------------------------------- Neuron nodes


def test_an_idle_trainium_node_is_rechecked_on_neuroncore_utilization_and_reclaimed(world: World) -> None:
    # Given a Trainium node (16 Neuron devices, no NVIDIA resource) in its pool, with a NodeClaim;
    # Container Insights publishes its NeuronCore utilisation (idle) and no GPU utilisation at all
    world.sim.create(nodepool("trn-training"))
    trn = world.sim.create(trainium_node("ip-10-0-8-10.us-west-2.compute.internal", "i-0000000000000b010"))
    world.sim.create(trainium_node("ip-10-0-8-11.us-west-2.compute.internal", "i-0000000000000b011"))
    world.sim.create(nodeclaim_for(trn))
    name = trn["metadata"]["name"]
    put_utilization("i-0000000000000b010", name, IDLE, metric="node_neuroncore_utilization")

    # When the fleet alarm's contributor for it goes to ALARM
    result = run(world, contributor_event(name, "i-0000000000000b010"))

    # Then it is an accelerator node, re-checked on node_neuroncore_utilization (idle), and reclaimed
    assert result["outcome"] == "handled", result["reason"]
    assert types(result)[-1] == "retire"


def test_a_busy_trainium_node_is_kept(world: World) -> None:
    world.sim.create(nodepool("trn-training"))
    trn = world.sim.create(trainium_node("ip-10-0-8-10.us-west-2.compute.internal", "i-0000000000000b010"))
    world.sim.create(trainium_node("ip-10-0-8-11.us-west-2.compute.internal", "i-0000000000000b011"))
    name = trn["metadata"]["name"]
    put_utilization("i-0000000000000b010", name, [80.0] * 6, metric="node_neuroncore_utilization")
    put_utilization("i-0000000000000b010", name, IDLE)  # a GPU series would say idle: it is not the node's

    result = run(world, contributor_event(name, "i-0000000000000b010"))

    assert result["outcome"] == "ignored"
    assert "busy again (80.0 %)" in result["reason"], result["reason"]
    assert_untouched(world, name)
