"""EKS Auto Mode (docs/cluster.md, "EKS Auto Mode") through the real services against the simulator:
an Auto Mode NodePool (`eks.amazonaws.com` `NodeClass`) and p5 nodes labelled as AWS labels them
(`eks.amazonaws.com/compute-type: auto`, `eks.amazonaws.com/instance-*`), no Karpenter Deployment."""

from __future__ import annotations

from typing import Any

from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.services.dispatch import handle_batch, handle_tick
from sim.actors.karpenter import Karpenter
from sim.builders import auto_mode_gpu_node, auto_mode_nodepool, nodeclaim_for
from sim.training_jobs import indexed_job_pod
from tests.integration.conftest import World
from tests.integration.test_gang_replacement import requirement, spot_warning

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
