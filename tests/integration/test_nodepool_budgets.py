"""The NodePool's disruption budgets on every voluntary path (docs/cluster.md, "The NodePool's own
rules"), through the real services against the simulator + moto: a budget of 0, reason- and
schedule-scoped budgets, nodes already being disrupted; a runbook drain unless --force; involuntary
kinds never wait."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuwarden.domain.annotations import rfc3339
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch
from tests.integration.conftest import World, load_event, types
from tests.integration.gpu_idle_cluster import (
    CLUSTER,
    IDLE,
    assert_untouched,
    contributor_event,
    idle_cluster,
    put_utilization,
)
from tests.integration.inputs import runbook
from tests.integration.scenarios import INSTANCE, NODE, spot_node

POOL = "gpu-inference"


def set_budgets(world: World, pool: str, budgets: list[dict[str, Any]]) -> None:
    world.sim.patch_direct("NodePool", pool, {"spec": {"disruption": {"budgets": budgets}}})


def reclaim(world: World, policy: Policy | None = None) -> dict[str, Any]:
    put_utilization(INSTANCE, NODE, IDLE)
    return handle_batch(parse_notices(contributor_event(NODE, INSTANCE)), world.deps(policy)).to_json()


def writes(world: World) -> list[str]:
    return [f"{r.method} {r.path}" for r in world.sim.requests if r.method not in ("GET", "HEAD")]


def no_writes_to_the_cluster(world: World) -> list[str]:
    """Writes other than the refusal's Event (the one thing a refusal leaves behind)."""
    return [w for w in writes(world) if "/events" not in w]


# --------------------------------------------------------------------------- gpu-idle


def test_a_budget_of_zero_refuses_the_reclaim_naming_the_pool_and_its_budget(world: World) -> None:
    # Given the seeds' training pool: "budgets: - nodes: '0'" (consolidation off during training)
    idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    set_budgets(world, POOL, [{"nodes": "0"}])
    world.sim.clear_requests()
    # When an idle alarm arrives for one of its nodes
    result = reclaim(world)
    # Then it is ignored, the reason names the pool and the budget, and no node or pod is touched
    assert result["outcome"] == "ignored", result["reason"]
    assert f"NodePool {POOL} budget #1 (nodes '0') allows 0 of its 3 nodes" in result["reason"]
    assert_untouched(world, NODE)
    assert no_writes_to_the_cluster(world) == []


def test_a_budget_scoped_to_underutilized_refuses_a_node_with_workload_but_not_an_empty_one(world: World) -> None:
    # Given a budget that stops only Underutilized disruptions (Karpenter's reasons)
    idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    set_budgets(world, POOL, [{"nodes": "0", "reasons": ["Underutilized"]}, {"nodes": "100%"}])
    # When the node still runs a workload pod (a trainer and a replica): Underutilized
    result = reclaim(world)
    # Then the reason-scoped budget refuses it
    assert result["outcome"] == "ignored"
    assert "reasons Underutilized" in result["reason"]
    assert "reason Underutilized" in result["reason"]
    assert_untouched(world, NODE)


def test_an_empty_node_counts_as_empty_and_a_budget_for_underutilized_does_not_hold_it(world: World) -> None:
    # Given the same budget, and a node with only its DaemonSet pod (Karpenter's Empty)
    cluster = idle_cluster(world.sim, extra_nodes=2, pool=POOL, trainer=False, inference=False)
    set_budgets(world, POOL, [{"nodes": "0", "reasons": ["Underutilized"]}])
    # When the alarm arrives
    result = reclaim(world)
    # Then it is reclaimed: no budget applies to Empty
    assert result["outcome"] == "handled", result["reason"]
    assert types(result)[-1] == "retire"
    claim = world.sim.get("NodeClaim", cluster.claims[NODE])
    assert claim is None or claim["metadata"].get("deletionTimestamp")


def test_a_scheduled_budget_holds_only_while_its_schedule_is_active(world: World) -> None:
    # Given a budget of 0 from the top of this hour for 2h (active now), and one that starts in 12h
    idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    hour = datetime.now(UTC).hour
    later = f"0 {(hour + 12) % 24} * * *"
    set_budgets(world, POOL, [{"nodes": "0", "schedule": later, "duration": "1h"}])
    # When the alarm arrives while only the later budget exists: it is not active, nothing limits
    first = reclaim(world, Policy(cluster=CLUSTER))
    assert first["outcome"] == "handled", first["reason"]


def test_a_budget_whose_schedule_is_active_now_refuses(world: World) -> None:
    idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    hour = datetime.now(UTC).hour
    set_budgets(world, POOL, [{"nodes": "0", "schedule": f"0 {hour} * * *", "duration": "2h"}])
    result = reclaim(world)
    assert result["outcome"] == "ignored"
    assert f"schedule '0 {hour} * * *' for 2h0m0s" in result["reason"]
    assert_untouched(world, NODE)


def test_nodes_already_being_disrupted_use_up_the_budget(world: World) -> None:
    # Given a budget of one node, and another node of the pool Karpenter is already disrupting
    cluster = idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    set_budgets(world, POOL, [{"nodes": "1"}])
    other = cluster.nodes[1]
    taints = world.node(other)["spec"].get("taints", [])
    disrupted = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
    world.sim.patch_direct("Node", other, {"spec": {"taints": [*taints, disrupted]}})
    # When the alarm arrives for the samples' node
    result = reclaim(world)
    # Then the budget is used up by the node being disrupted, which the reason names
    assert result["outcome"] == "ignored"
    assert "allows 1 of its 3 nodes" in result["reason"]
    assert f"1 being disrupted ({other}): 0 more" in result["reason"]
    assert_untouched(world, NODE)


def test_a_percentage_is_of_the_pools_nodes_rounded_up(world: World) -> None:
    # Given 10% of a 3-node pool (0.3 → 1) and one node already held by gpuwarden
    cluster = idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    set_budgets(world, POOL, [{"nodes": "10%"}])
    world.sim.patch_direct(
        "Node",
        cluster.nodes[2],
        {"metadata": {"annotations": {"gpuwarden.io/event-id": "e-1", "gpuwarden.io/kind": "gpu-idle"}}},
    )
    result = reclaim(world)
    assert result["outcome"] == "ignored"
    assert "allows 1 of its 3 nodes" in result["reason"]
    assert f"1 being disrupted ({cluster.nodes[2]}): 0 more" in result["reason"]


def test_a_window_refusal_is_named_before_a_budget_refusal(world: World) -> None:
    idle_cluster(world.sim, extra_nodes=2, pool=POOL)
    set_budgets(world, POOL, [{"nodes": "0"}])
    freeze = {"name": "freeze", "schedule": "* * * * *", "timezone": "UTC", "duration": "2h", "max_disruptions": 0}
    result = reclaim(world, Policy.model_validate({"cluster": CLUSTER, "windows": [freeze]}))
    assert result["outcome"] == "ignored"
    assert "window 'freeze'" in result["reason"]
    assert "budget" not in result["reason"]


# --------------------------------------------------------------------------- runbook, rebalance, spot


def test_a_runbook_drain_is_refused_by_a_budget_of_zero_unless_forced(world: World) -> None:
    spot_node(world.sim)
    set_budgets(world, "gpu-training", [{"nodes": "0"}])
    refused = runbook(world, action="drain")
    assert refused["outcome"] == "ignored"
    assert "NodePool gpu-training budget #1 (nodes '0')" in refused["reason"]
    assert "force overrides it" in refused["reason"]
    assert not world.node(NODE)["spec"].get("unschedulable")
    forced = runbook(world, action="drain", force=True, dry_run=True)
    assert forced["outcome"] == "dry-run", forced["reason"]
    assert "budget" not in forced["reason"]


def test_a_rebalance_drain_is_held_to_prepare_by_the_budget(world: World) -> None:
    # Given a policy that drains on a rebalance recommendation, and a pool whose budget is 0
    spot_node(world.sim)
    set_budgets(world, "gpu-training", [{"nodes": "0"}])
    drains = POLICY.model_validate({"cluster": CLUSTER, "rebalance": {"action": "drain"}})
    # When the recommendation arrives
    result = handle_batch(parse_notices(load_event("rebalance-recommendation.json")), world.deps(drains)).to_json()
    # Then the node is prepared (cordoned, asked to checkpoint) but not drained: the budget refused
    refusals = [a for a in result["actions"] if a["type"] == "refused"]
    assert refusals
    assert "NodePool gpu-training budget #1 (nodes '0')" in refusals[0]["reason"]
    assert not any(a["type"] == "evict" for a in result["actions"])


def test_an_involuntary_notice_never_waits_for_a_budget(world: World) -> None:
    spot_node(world.sim)
    set_budgets(world, "gpu-training", [{"nodes": "0"}])
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    result = handle_batch(parse_notices(event), world.deps(Policy(cluster=CLUSTER))).to_json()
    assert result["outcome"] == "handled", result["reason"]
    assert "budget" not in result["reason"]
    assert world.node(NODE)["spec"].get("unschedulable") is True
