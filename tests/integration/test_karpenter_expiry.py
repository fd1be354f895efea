"""`karpenter-expiry` (docs/cluster.md, "Expiry") through the real services against the simulator +
moto: the periodic reconcile finds each Karpenter node's expiry; one 20 minutes away (inside the
30-minute lead) is drained at once, checkpoints first; one 29 days away is planned, not touched."""

from __future__ import annotations

from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_scheduler_tick
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_tick
from sim.actors.karpenter import DO_NOT_DISRUPT as DND
from sim.builders import nodeclaim_for
from tests.integration.conftest import World
from tests.integration.scenarios import NODE, spot_node

OTHER = "ip-10-0-2-40.us-west-2.compute.internal"
RECONCILE = {"gpuwarden": "budget-window", "action": "reconcile"}


def expiring(world: World, expire_after: dict[str, str]) -> dict[str, str]:
    """The sample cluster, each node's NodeClaim created now with ``expire_after[node]``."""
    spot_node(world.sim)
    claims = {}
    for name, after in expire_after.items():
        claim = nodeclaim_for(world.node(name))
        claim["spec"]["expireAfter"] = after
        claims[name] = world.sim.create(claim)["metadata"]["name"]
    return claims


def reconcile(world: World, policy: Policy | None = None) -> dict[str, Any]:
    return handle_tick(parse_scheduler_tick(RECONCILE), world.deps(policy)).to_json()


def test_an_expiry_twenty_minutes_away_is_drained_now_and_one_29_days_away_is_planned(world: World) -> None:
    claims = expiring(world, {NODE: "20m", OTHER: "696h"})
    result = reconcile(world)
    types = [a["type"] for a in result["actions"]]
    # the node inside the lead: cordoned, asked to checkpoint, drained, before Karpenter's expiry
    assert "cordon" in types
    assert "checkpoint-requested" in types
    assert "drain-complete" in types
    node = world.node(NODE)
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["annotations"]["gpuwarden.io/kind"] == "karpenter-expiry"
    # the other: planned 30 min before its expiry, nothing written on it
    (planned,) = [a for a in result["actions"] if a["type"] == "expiry-planned"]
    assert planned["target"] == claims[OTHER]
    assert planned["node_name"] == OTHER
    assert "30 min before Karpenter expires the node" in planned["reason"]
    assert not world.node(OTHER)["spec"].get("unschedulable")
    (skipped,) = [a for a in result["actions"] if a["type"] == "schedule-skipped"]
    assert skipped["tick"]["action"] == "karpenter-expiry-due"
    assert skipped["tick"]["plan_id"] == OTHER
    # a second reconcile plans nothing twice
    again = reconcile(world)
    assert "expiry-planned" not in [a["type"] for a in again["actions"]]
    assert "1 planned before" in again["reason"]


def test_never_and_no_expire_after_plan_nothing(world: World) -> None:
    expiring(world, {NODE: "Never"})
    result = reconcile(world)
    assert "expiry-planned" not in [a["type"] for a in result["actions"]]
    assert "Karpenter expiry" not in result["reason"]


def test_the_switch_turns_the_expiry_plans_off(world: World) -> None:
    expiring(world, {NODE: "20m"})
    off = POLICY.model_validate({"cluster": "ml-prod", "karpenter_expiry": {"enabled": False}})
    reconcile(world, off)
    assert not world.node(NODE)["spec"].get("unschedulable")


def test_the_due_tick_reads_the_claim_again_and_drains(world: World) -> None:
    expiring(world, {NODE: "20m"})
    tick = {"gpuwarden": "budget-window", "action": "karpenter-expiry-due", "plan_id": NODE}
    result = handle_tick(parse_scheduler_tick(tick), world.deps()).to_json()
    assert result["outcome"] == "handled", result["reason"]
    assert result["kind"] == "karpenter-expiry"
    assert world.node(NODE)["spec"].get("unschedulable") is True


def test_a_node_whose_pods_stay_for_good_gets_no_replacement(world: World) -> None:
    # Given the node's only workload pods carry karpenter.sh/do-not-disrupt and its NodeClaim has no
    # terminationGracePeriod (the seeds'): the expiry drain leaves them, nothing ever forces them off
    spot_node(world.sim, inference=0, pdb_min_available=None)
    claim = nodeclaim_for(world.node(NODE))
    claim["spec"]["expireAfter"] = "20m"
    world.sim.create(claim)
    for pod in world.sim.list("Pod", "ml"):
        world.sim.patch_direct("Pod", pod["metadata"]["name"], {"metadata": {"annotations": {DND: "true"}}}, "ml")
    claims_before = {c["metadata"]["name"] for c in world.sim.list("NodeClaim")}
    # When the reconcile drains it inside the lead
    result = reconcile(world)
    types = [a["type"] for a in result["actions"]]
    assert "drain-complete" in types, types
    # Then no replacement is launched for pods that never move (Karpenter's provisioner launches
    # none either: v1.14.1 IsCurrentlyReschedulable), not in the urgent part nor by a drain round
    assert "replacement" not in types, result["actions"]
    (skipped,) = [a for a in result["actions"] if a["type"] == "replacement-skipped"]
    assert skipped["reason"].startswith("no pod moves off the node"), skipped
    assert {c["metadata"]["name"] for c in world.sim.list("NodeClaim")} == claims_before
    assert "gpuwarden.io/replacement" not in world.node(NODE)["metadata"]["annotations"]
