"""Limits and tiers in the replacement (docs/cluster.md, "Limits and tiers"), through the real
services against the simulator + moto: a full pool falls back to the next pool by weight whose
template admits the pods; with none, no NodeClaim and each pool's reason."""

from __future__ import annotations

from typing import Any

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.builders import nodepool
from tests.integration.conftest import World
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import INSTANCE, NODE, spot_node

GPU = "nvidia.com/gpu"


def in_use(world: World, pool: str, gpus: int, nodes: int) -> None:
    """The pool's status.resources, as Karpenter's counter keeps it (the simulator's Karpenter does
    not keep the counter: the test writes what the real one would)."""
    world.sim.patch_direct("NodePool", pool, {"status": {"resources": {GPU: str(gpus), "nodes": str(nodes)}}})


def replacement(result: dict[str, Any]) -> dict[str, Any]:
    return next(a for a in result["actions"] if a["type"].startswith("replacement"))


def claims_of(world: World) -> list[dict[str, Any]]:
    return [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")]


def test_a_pool_within_its_limits_takes_its_own_replacement(world: World) -> None:
    spot_node(world.sim)
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    assert replacement(result)["type"] == "replacement"
    [claim] = claims_of(world)
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-training"


def test_a_full_pool_falls_back_to_the_on_demand_tier_by_weight(world: World) -> None:
    # Given the seeds' tiers: a Spot pool (weight 100) at its GPU limit, an on-demand fallback
    # (weight 10) and a pool with a taint the pods do not tolerate (weight 50)
    spot_node(world.sim)
    world.sim.patch_direct("NodePool", "gpu-training", {"spec": {"weight": 100, "limits": {GPU: "16"}}})
    fallback = nodepool("gpu-on-demand", capacity_types=("on-demand",), gpu_limit=64)
    fallback["spec"]["weight"] = 10
    world.sim.create(fallback)
    tainted = nodepool("gpu-reserved", gpu_limit=64)
    tainted["spec"]["weight"] = 50
    tainted["spec"]["template"]["spec"]["taints"].append({"key": "team", "value": "infra", "effect": "NoSchedule"})
    world.sim.create(tainted)
    # When the node's Spot warning arrives (it is lost: its 8 GPUs leave the count, 8 in use remain)
    in_use(world, "gpu-training", 24, 3)
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    # Then the replacement is the on-demand pool's, and the reason names why the others could not
    action = replacement(result)
    assert action["type"] == "replacement", action
    [claim] = claims_of(world)
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-on-demand"
    assert "NodePool gpu-on-demand, the next tier" in action["reason"]
    assert "NodePool gpu-training: spec.limits nvidia.com/gpu is 16" in action["reason"]
    assert "NodePool gpu-reserved" in action["reason"]
    assert "does not tolerate its taint team=infra:NoSchedule" in action["reason"]


def test_with_no_pool_left_there_is_no_replacement_and_each_pool_is_named(world: World) -> None:
    spot_node(world.sim)
    world.sim.patch_direct("NodePool", "gpu-training", {"spec": {"limits": {GPU: "16"}}})
    in_use(world, "gpu-training", 24, 3)
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    action = replacement(result)
    assert action["type"] == "replacement-skipped"
    assert "no NodePool can take the replacement" in action["reason"]
    assert "spec.limits nvidia.com/gpu is 16; 16 in use" in action["reason"]
    assert claims_of(world) == []
    # the interrupted node's claim is taken back: a later notice may launch one
    assert "gpuwarden.io/replacement" not in (world.node(NODE)["metadata"].get("annotations") or {})
    assert INSTANCE in result["instance_id"]
