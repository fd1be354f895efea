"""EKS Auto Mode (docs/cluster.md, "EKS Auto Mode") through the real services against the simulator:
an Auto Mode NodePool (`eks.amazonaws.com` `NodeClass`) and p5 nodes labelled as AWS labels them
(`eks.amazonaws.com/compute-type: auto`, `eks.amazonaws.com/instance-*`), no Karpenter Deployment: a Spot
warning on a gang, expiry, and GPU-idle, whose "where next" reads the nodes' Auto Mode labels."""

from __future__ import annotations

from typing import Any

from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch, handle_tick
from sim.actors.karpenter import Karpenter
from sim.builders import auto_mode_gpu_node, auto_mode_nodepool, nodeclaim_for
from sim.builders.pods import inference_pod
from sim.training_jobs import indexed_job_pod
from tests.integration.conftest import World
from tests.integration.gpu_idle_cluster import IDLE, contributor_event, put_utilization
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import requirement

AUTO_GPU_NAME = "eks.amazonaws.com/instance-gpu-name"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
RECONCILE = {"gpuwarden": "budget-window", "action": "reconcile"}


def auto_mode_job(world: World, ranks: int = 4) -> list[str]:
    """The seed's Indexed Job, one rank per Auto Mode Spot p5 node in us-west-2b: the nodes' names."""
    world.sim.create(auto_mode_nodepool("gpu-auto"))
    nodes = []
    for rank in range(ranks):
        node = world.sim.create(auto_mode_gpu_node(f"i-0{rank + 1:016x}", zone="us-west-2b"))
        world.sim.create(nodeclaim_for(node))
        pod = indexed_job_pod("llama-ft", rank, node, checkpoint="annotate")
        pod["spec"]["terminationGracePeriodSeconds"] = 2
        world.sim.create(pod)
        nodes.append(node["metadata"]["name"])
    return nodes


def test_a_spot_warning_on_auto_mode_replaces_on_its_node_class_keeping_the_gangs_gpu_model(world: World) -> None:
    # Given a four-rank gang on Auto Mode p5 (H100) nodes
    nodes = auto_mode_job(world)
    # When rank 1's node gets its Spot warning
    result = handle_batch(parse_notices(spot_warning(world, "i-0" + f"{2:016x}")), world.deps()).to_json()
    # Then the whole gang is asked to checkpoint, the node is cordoned
    assert result["outcome"] == "handled", result["reason"]
    assert result["node"] == nodes[1]
    (gang,) = result["checkpoints"]
    assert len(gang["asked"]) == 4
    assert world.node(nodes[1])["spec"]["unschedulable"] is True
    # And the replacement is a NodeClaim on Auto Mode's NodeClass, pinned to the gang's GPU model under
    # Auto Mode's own label key (the node carries no karpenter.k8s.aws/* key)
    claims = [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")]
    (claim,) = claims
    assert claim["spec"]["nodeClassRef"] == {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"}
    assert requirement(claim, AUTO_GPU_NAME) == [{"key": AUTO_GPU_NAME, "operator": "In", "values": ["h100"]}]
    assert requirement(claim, KARPENTER_GPU_NAME) == []
    # And (Auto Mode's) Karpenter launches it
    Karpenter(world.sim, launch_seconds=0).step()
    launched = world.sim.get("NodeClaim", claim["metadata"]["name"])
    assert launched is not None
    assert launched["status"].get("nodeName")


def test_an_auto_mode_expiry_inside_the_lead_is_drained_with_checkpoints_first(world: World) -> None:
    # Given an Auto Mode node whose NodeClaim expires in 20 minutes (inside the 30-minute lead)
    world.sim.create(auto_mode_nodepool("gpu-auto"))
    node = world.sim.create(auto_mode_gpu_node("i-0abc1234def567890"))
    claim = nodeclaim_for(node)
    claim["spec"]["expireAfter"] = "20m"
    world.sim.create(claim)
    pod = indexed_job_pod("llama-ft", 0, node, checkpoint="annotate")
    pod["spec"]["terminationGracePeriodSeconds"] = 2
    world.sim.create(pod)
    # When the periodic reconcile runs
    result: dict[str, Any] = handle_tick(parse_scheduler_tick(RECONCILE), world.deps()).to_json()
    # Then it is drained as a Karpenter node's expiry: cordoned, asked to checkpoint, drained
    types = [a["type"] for a in result["actions"]]
    assert "cordon" in types, result
    assert types.index("checkpoint-requested") < types.index("drain-complete")
    marked = world.node(node["metadata"]["name"])
    assert marked["metadata"]["annotations"]["gpuwarden.io/kind"] == "karpenter-expiry"


# --------------------------------------------------------------------------- GPU-idle on Auto Mode

IDLE_NODE, IDLE_INSTANCE = "i-0abc1234def567890", "i-0abc1234def567890"  # Auto Mode names a node by its instance
OTHER_INSTANCE = "i-0aaaabbbbcccc1111"


def idle_auto_mode_replica(world: World, *, other_gpu: str) -> None:
    """Two Auto Mode nodes of one NodePool; on the idle one, an inference replica pinned to H100s by
    Auto Mode's own label key; the other node is an H100 (``other_gpu="h100"``) or not, with free GPUs."""
    world.sim.create(auto_mode_nodepool("gpu-auto"))
    for instance in (IDLE_INSTANCE, OTHER_INSTANCE):
        node = auto_mode_gpu_node(instance, zone="us-west-2b")
        if instance == OTHER_INSTANCE:
            node["metadata"]["labels"][AUTO_GPU_NAME] = other_gpu
        world.sim.create(nodeclaim_for(world.sim.create(node)))
    pod = inference_pod("chat-0", IDLE_NODE, grace=2)
    term = {"matchExpressions": [{"key": AUTO_GPU_NAME, "operator": "In", "values": ["h100"]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    world.sim.create(pod)
    put_utilization(IDLE_INSTANCE, IDLE_NODE, IDLE)


def idle_alarm(world: World) -> dict[str, Any]:
    policy = POLICY.model_validate({"cluster": "ml-prod", "gpu_idle": {}})
    event = contributor_event(IDLE_NODE, IDLE_INSTANCE)
    return handle_batch(parse_notices(event), world.deps(policy)).to_json()


def test_gpu_idle_on_auto_mode_reclaims_the_node_when_its_replica_fits_on_another_h100(world: World) -> None:
    # Given an idle Auto Mode node whose replica may run only on H100s (eks.amazonaws.com/instance-gpu-name)
    # and another Auto Mode H100 node with free GPUs
    idle_auto_mode_replica(world, other_gpu="h100")
    claim = nodeclaim_for(world.node(IDLE_NODE))["metadata"]["name"]
    # When its GPU-idle alarm contributor goes to ALARM
    result = idle_alarm(world)
    # Then it is reclaimed as a Karpenter node: cordoned, drained, its Auto Mode NodeClaim retired
    assert result["outcome"] == "handled", result["reason"]
    seen = [a["type"] for a in result["actions"]]
    assert seen[0] == "cordon"
    assert seen.index("evict") < seen.index("drain-complete")
    assert result["actions"][-1] == result["actions"][seen.index("retire")]
    assert result["actions"][-1]["target"] == f"nodeclaim/{claim}"
    gone = world.sim.get("NodeClaim", claim)
    assert gone is None or gone["metadata"].get("deletionTimestamp")
    assert world.pod("serving/chat-0") is None
    # and nothing is launched ahead for an idle node
    assert not [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")]


def test_gpu_idle_on_auto_mode_keeps_the_node_when_only_another_gpu_model_has_room(world: World) -> None:
    # Given the same replica, and the pool's other node an A100 by Auto Mode's label
    idle_auto_mode_replica(world, other_gpu="a100")
    # When its GPU-idle alarm fires
    result = idle_alarm(world)
    # Then the node is kept: the replica would come straight back on new capacity, and its owner is named
    assert result["outcome"] == "ignored", result
    assert "serving/chat-0 (ReplicaSet/inference-6d4cf56db) would come straight back" in result["reason"]
    assert not world.node(IDLE_NODE)["spec"].get("unschedulable")
    (held,) = [a for a in result["actions"] if a["type"] == "idle-gpus-held"]
    assert held["owner"] == "ReplicaSet/inference-6d4cf56db"
