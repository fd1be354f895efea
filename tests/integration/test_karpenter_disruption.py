"""`karpenter-disruption` (docs/cluster.md, "Beside Karpenter") through the real services against the
simulator: the scan finds a node Karpenter is disrupting and asks its opted-in pods to checkpoint,
once; nothing is cordoned, evicted or replaced."""

from __future__ import annotations

from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.services.dispatch import handle_scan
from tests.integration.conftest import World
from tests.integration.scenarios import NODE, spot_node

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def disrupting(world: World) -> None:
    """Karpenter's disruption queue taints the node before it launches replacements and evicts."""
    taints = world.node(NODE)["spec"].get("taints", [])
    world.sim.patch_direct("Node", NODE, {"spec": {"taints": [*taints, DISRUPTED]}})


def writes(world: World) -> list[str]:
    return [f"{r.method} {r.path}" for r in world.sim.requests if r.method not in ("GET", "HEAD")]


def part(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The karpenter-disruption answers for nodes, however deep the scan's answer nests them."""
    found = [r for sub in result.get("results") or [] for r in part(sub)]
    mine = result.get("kind") == "karpenter-disruption" and result.get("node")
    return [result, *found] if mine else found


def test_the_scan_asks_the_pods_of_a_node_karpenter_disrupts_to_checkpoint_once(world: World) -> None:
    scenario = spot_node(world.sim, modes=("annotate",))
    disrupting(world)
    world.sim.clear_requests()
    # When the scan runs
    first = handle_scan(None, world.deps()).to_json()
    # Then the opted-in trainer is asked, under the disruption's id
    (answer,) = part(first)
    assert answer["outcome"] == "handled", answer
    asked = [a["pod"] for a in answer["actions"] if a["type"] == "checkpoint-requested"]
    assert asked == [scenario.trainers["annotate"]]
    trainer = world.pod(scenario.trainers["annotate"])
    assert trainer is not None
    assert trainer["metadata"]["annotations"]["gpuwarden.io/checkpoint-event-id"].startswith("karpenter-disruption:")
    # and nothing else: no cordon, no eviction, no NodeClaim, no do-not-disrupt
    node = world.node(NODE)
    assert not node["spec"].get("unschedulable")
    assert "gpuwarden.io/event-id" not in (node["metadata"].get("annotations") or {})
    assert not [w for w in writes(world) if "eviction" in w or "nodeclaims" in w or "/nodes/" in w]
    assert "karpenter.sh/do-not-disrupt" not in trainer["metadata"]["annotations"]
    # a second scan asks nothing twice
    assert part(handle_scan(None, world.deps()).to_json()) == []


def test_a_node_not_being_disrupted_is_left_alone(world: World) -> None:
    spot_node(world.sim, modes=("annotate",))
    result = handle_scan(None, world.deps()).to_json()
    assert part(result) == []
    assert result["kind"] == "gpu-unhealthy"


def node_lists(world: World) -> list[str]:
    return [r.path for r in world.sim.requests if r.method == "GET" and r.path == "/api/v1/nodes"]


def test_the_scan_lists_the_nodes_once_for_every_kinds_part(world: World) -> None:
    # Given a node Karpenter is disrupting (the karpenter-disruption part) and GPU nodes (gpu-health)
    spot_node(world.sim, modes=("annotate",))
    disrupting(world)
    world.sim.clear_requests()
    # When the scan runs
    result = handle_scan(None, world.deps()).to_json()
    # Then both parts answered from one LIST of the nodes (was 2: each part listed them)
    assert part(result)
    assert len(node_lists(world)) == 1
    # And a quiet scan too
    world.sim.clear_requests()
    handle_scan(None, world.deps())
    assert len(node_lists(world)) == 1


def test_the_scan_narrowed_by_node_selector_narrows_the_karpenter_disruption_part_too(world: World) -> None:
    spot_node(world.sim, modes=("annotate",))
    disrupting(world)
    policy = Policy.model_validate({"cluster": "ml-prod", "gpu_health": {"node_selector": "team=elsewhere"}})
    assert part(handle_scan(None, world.deps(policy)).to_json()) == []


def test_the_scan_answers_one_flat_list_each_result_with_its_own_kind(world: World) -> None:
    # Given a node Karpenter is disrupting and another whose GPU condition failed
    from tests.integration.gpu_health_reports import failing

    spot_node(world.sim, modes=("annotate",))
    disrupting(world)
    other = "ip-10-0-2-40.us-west-2.compute.internal"
    failing(world.sim, other)
    # When the scan runs
    result = handle_scan(None, world.deps()).to_json()
    # Then its results are one flat list of per-node answers, each of its own kind (contract §5),
    # and the reason says what each part found (not "None: ignored")
    assert result["kind"] == "gpu-unhealthy"
    assert sorted((r["kind"], r["node"]) for r in result["results"]) == [
        ("gpu-unhealthy", other),
        ("karpenter-disruption", NODE),
    ]
    assert not [r for r in result["results"] if r.get("results")]
    assert "None" not in result["reason"]
    assert result["outcome"] == "handled"
