"""The replacement for one rank's node keeps the gang together: the gang's zone, the pods' own
constraints, validated by Karpenter's NodeClaim CRD admission and launched by its stand-in."""

from __future__ import annotations

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.actors.karpenter import Karpenter
from sim.builders import gpu_node, nodepool
from sim.training_jobs import indexed_job_pod
from tests.integration.conftest import World
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import requirement

ZONE, CAPACITY = "topology.kubernetes.io/zone", "karpenter.sh/capacity-type"


def seed_job(world: World, zones: tuple[str, ...], node_selector: dict[str, str] | None = None) -> list[str]:
    """The seed's four-rank Indexed Job, one Spot p4d node per rank in ``zones``: the ranks' nodes."""
    world.sim.create(nodepool("gpu-training"))
    nodes = []
    for rank, zone in enumerate(zones):
        name = f"ip-10-0-{rank + 1}-50.us-west-2.compute.internal"
        node = world.sim.create(gpu_node(name, f"i-0{rank + 1:016x}", zone=zone))
        pod = indexed_job_pod("llama-ft", rank, node, checkpoint="annotate")
        pod["spec"]["terminationGracePeriodSeconds"] = 2
        if node_selector:
            pod["spec"]["nodeSelector"] = dict(node_selector)
        world.sim.create(pod)
        nodes.append(name)
    return nodes


def test_a_ranks_replacement_lands_in_the_gangs_zone_on_the_same_instance_type(world: World) -> None:
    # Given the four ranks in us-west-2b, and a NodePool that allows three zones, two types, spot and on-demand
    seed_job(world, ("us-west-2b",) * 4)
    # When rank 1's node gets its Spot warning
    result = handle_batch(parse_notices(spot_warning(world, f"i-0{2:016x}")), world.deps()).to_json()
    # Then the replacement NodeClaim asks for the gang's zone, and leaves the interrupted pool
    # (p4d, us-west-2b, spot) by capacity type, keeping the instance type the other ranks run
    assert result["outcome"] == "handled", result["reason"]
    replaced = next(a for a in result["actions"] if a["type"] == "replacement")
    assert "the gang's zone us-west-2b" in replaced["reason"]
    [claim] = world.sim.list("NodeClaim")
    assert requirement(claim, ZONE)[-1] == {"key": ZONE, "operator": "In", "values": ["us-west-2b"]}
    assert requirement(claim, CAPACITY)[-1] == {"key": CAPACITY, "operator": "In", "values": ["on-demand"]}
    # And Karpenter launches it there
    Karpenter(world.sim, launch_seconds=0).step()
    launched = world.sim.get("NodeClaim", claim["metadata"]["name"])
    assert launched is not None
    assert launched["metadata"]["labels"][ZONE] == "us-west-2b"
    assert launched["metadata"]["labels"][CAPACITY] == "on-demand"


def test_a_rank_outside_the_gangs_zone_is_replaced_into_the_gangs_zone(world: World) -> None:
    # Given three ranks in us-west-2c and rank 1 alone in us-west-2a
    seed_job(world, ("us-west-2c", "us-west-2a", "us-west-2c", "us-west-2c"))
    # When rank 1's node gets its Spot warning
    result = handle_batch(parse_notices(spot_warning(world, f"i-0{2:016x}")), world.deps()).to_json()
    # Then its replacement goes to us-west-2c: that already leaves the interrupted pool, so it stays spot-able
    assert result["outcome"] == "handled", result["reason"]
    [claim] = world.sim.list("NodeClaim")
    assert requirement(claim, ZONE)[-1]["values"] == ["us-west-2c"]
    assert [r["values"] for r in requirement(claim, CAPACITY)] == [["spot", "on-demand"]]
    Karpenter(world.sim, launch_seconds=0).step()
    launched = world.sim.get("NodeClaim", claim["metadata"]["name"])
    assert launched is not None
    assert (launched["metadata"]["labels"][ZONE], launched["metadata"]["labels"][CAPACITY]) == ("us-west-2c", "spot")


def test_the_pods_node_selector_is_a_requirement_of_the_replacement(world: World) -> None:
    # Given ranks that select p4d nodes by instance type
    selector = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    seed_job(world, ("us-west-2b",) * 4, node_selector=selector)
    # When rank 1's node gets its Spot warning
    handle_batch(parse_notices(spot_warning(world, f"i-0{2:016x}")), world.deps())
    # Then the NodeClaim (admitted by Karpenter's CRD) requires p4d, as the ranks do
    [claim] = world.sim.list("NodeClaim")
    types = requirement(claim, "node.kubernetes.io/instance-type")
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p4d.24xlarge"]} in types
    assert all(r["operator"] != "NotIn" for r in types)


def test_a_nodepool_whose_taint_the_pods_do_not_tolerate_gets_no_replacement_and_says_why(world: World) -> None:
    # Given ranks that do not tolerate a taint the NodePool's template now carries
    seed_job(world, ("us-west-2b",) * 4)
    pool = world.sim.get("NodePool", "gpu-training")
    assert pool is not None
    taints = [*pool["spec"]["template"]["spec"]["taints"], {"key": "team", "value": "vision", "effect": "NoSchedule"}]
    world.sim.patch_direct("NodePool", "gpu-training", {"spec": {"template": {"spec": {"taints": taints}}}})
    # When rank 1's node gets its Spot warning
    result = handle_batch(parse_notices(spot_warning(world, f"i-0{2:016x}")), world.deps()).to_json()
    # Then no NodeClaim is created, the skip names the taint, and the node is still drained
    assert world.sim.list("NodeClaim") == []
    skipped = next(a for a in result["actions"] if a["type"] == "replacement-skipped")
    assert "team=vision:NoSchedule" in skipped["reason"]
    assert result["drain"]["outcome"] == "drained"
