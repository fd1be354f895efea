"""The replacement's karpenter.sh/do-not-disrupt hold (docs/cluster.md, "Replacement capacity"),
through the real services against the simulator + moto: written with the NodeClaim, taken back by
the periodic reconcile once its pods run there or `replacement.hold_minutes` have passed, from the
NodeClaim and its node, and only gpuwarden's own.

The simulator's Karpenter does not launch a NodeClaim gpuwarden creates; each test registers its
node as Karpenter's registration does (the node named in status.nodeName, the claim's annotations
copied). That Karpenter honours the hold is shown on the real plane (tests/e2e/scenes/test_rebalance_scene.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.kinds.registry import spec_of
from gpuwarden.services.dispatch import handle_batch, handle_tick
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.holds import take_back_hold
from gpuwarden.services.engine.pipeline import drain_to_end, round_of
from sim.builders import gpu_node, inference_pod, nodeclaim_for, nodepool, training_pod
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import NODE as NODE_OF_SAMPLES
from tests.integration.scenarios import spot_node

HOLD = "karpenter.sh/do-not-disrupt"
UNTIL = "gpuwarden.io/hold-until"
NEW_NODE = "ip-10-0-9-99.us-west-2.compute.internal"
RECONCILE = {"gpuwarden": "budget-window", "action": "reconcile"}


def launched(world: World, policy: Policy | None = None) -> dict[str, Any]:
    """A Spot warning for the samples' node; answers gpuwarden's replacement NodeClaim."""
    spot_node(world.sim)
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    handle_batch(parse_notices(event), world.deps(policy))
    (claim,) = [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")]
    return claim


def register(world: World, claim: dict[str, Any]) -> None:
    """What Karpenter's registration does for the claim: its node, with the claim's annotations."""
    node = gpu_node(NEW_NODE, "i-0999999999999999a", nodepool="gpu-training")
    node["metadata"]["annotations"] |= dict(claim["metadata"].get("annotations") or {})
    world.sim.create(node)
    world.sim.patch_direct("NodeClaim", claim["metadata"]["name"], {"status": {"nodeName": NEW_NODE}})


def reconcile(world: World) -> dict[str, Any]:
    return handle_tick(parse_scheduler_tick(RECONCILE), world.deps()).to_json()


def holds(world: World, claim: str) -> tuple[str | None, str | None]:
    found = world.sim.get("NodeClaim", claim)
    node = world.sim.get("Node", NEW_NODE)
    assert found is not None
    assert node is not None
    return (found["metadata"].get("annotations") or {}).get(HOLD), (node["metadata"].get("annotations") or {}).get(HOLD)


def test_the_replacement_is_launched_held_for_hold_minutes(world: World) -> None:
    claim = launched(world, Policy.model_validate({"cluster": "ml-prod", "replacement": {"hold_minutes": 20}}))
    notes = claim["metadata"]["annotations"]
    assert notes[HOLD] == "true"
    assert notes[UNTIL] > rfc3339(world.sim.clock.now() + timedelta(minutes=19))
    assert notes[UNTIL] <= rfc3339(world.sim.clock.now() + timedelta(minutes=20))


def test_an_empty_replacement_stays_held_until_its_time_then_the_reconcile_takes_the_hold_back(world: World) -> None:
    claim = launched(world)
    name = claim["metadata"]["name"]
    register(world, claim)
    # Given the drain is over but nothing runs on the replacement yet: the reconcile keeps the hold
    first = reconcile(world)
    assert "hold-released" not in [a["type"] for a in first["actions"]]
    assert holds(world, name) == ("true", "true")
    # When replacement.hold_minutes (15) have passed
    world.sim.clock.advance(16 * 60)
    result = reconcile(world)
    # Then the hold is gone from the claim and its node, and the answer says why
    released = [a for a in result["actions"] if a["type"] == "hold-released"]
    assert [a["target"] for a in released] == [f"nodeclaim/{name}"]
    assert "replacement.hold_minutes passed" in released[0]["reason"]
    assert "1 replacement hold released" in result["reason"]
    assert holds(world, name) == (None, None)


def test_the_hold_goes_as_soon_as_a_pod_runs_on_the_replacement(world: World) -> None:
    claim = launched(world)
    register(world, claim)
    world.sim.create(inference_pod("inference-moved", world.sim.get("Node", NEW_NODE)))  # type: ignore[arg-type]
    result = reconcile(world)
    released = [a for a in result["actions"] if a["type"] == "hold-released"]
    assert len(released) == 1
    assert f"its pods run on {NEW_NODE}" in released[0]["reason"]
    assert holds(world, claim["metadata"]["name"]) == (None, None)


def test_a_hold_taken_back_with_a_reason_goes_at_once(world: World) -> None:
    claim = launched(world)
    register(world, claim)
    name = claim["metadata"]["name"]
    recorder = Recorder(world.deps(), "release")
    read = world.sim.get("NodeClaim", name)
    assert read is not None
    assert take_back_hold(recorder, read, reason="the disruption was released") == name
    assert holds(world, name) == (None, None)
    assert [(a["type"], a["reason"]) for a in recorder.actions] == [("hold-released", "the disruption was released")]


def test_an_owners_do_not_disrupt_on_another_nodeclaim_is_never_touched(world: World) -> None:
    # Given a NodeClaim (not gpuwarden's) its owner marked do-not-disrupt, and a long time passing
    world.sim.create(nodepool("gpu-owned"))
    node = world.sim.create(
        gpu_node("ip-10-0-8-8.us-west-2.compute.internal", "i-0888888888888888b", nodepool="gpu-owned")
    )
    owned = nodeclaim_for(node)
    owned["metadata"]["annotations"] = {HOLD: "true"}
    world.sim.create(owned)
    world.sim.clock.advance(24 * 3600)
    reconcile(world)
    found = world.sim.get("NodeClaim", owned["metadata"]["name"])
    assert found is not None
    assert found["metadata"]["annotations"][HOLD] == "true"


# --------------------------------------------------------------------------- attempts


def next_round(world: World, result: dict[str, Any], policy: Policy | None = None) -> list[dict[str, Any]]:
    """One more drain round for the notice, as the drain workflow runs it: its recorded actions."""
    state = DrainState.model_validate({**result["drain"], "done": False})
    recorder = Recorder(world.deps(policy), result["event_id"])
    round_of(recorder, state, spec_of(Kind.SPOT_INTERRUPTION).hooks)
    return recorder.actions


def not_launched(world: World, claim: str) -> None:
    """What Karpenter writes when the cloud has no capacity for the claim (InsufficientCapacityError)."""
    failed = {
        "type": "Launched",
        "status": "False",
        "reason": "InsufficientCapacity",
        "message": "all requested instance types were unavailable during launch",
    }
    world.sim.patch_direct("NodeClaim", claim, {"status": {"conditions": [failed]}})


def spot_warned(world: World, policy: Policy | None = None) -> dict[str, Any]:
    spot_node(world.sim)
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    return handle_batch(parse_notices(event), world.deps(policy)).to_json()


def tiers_of(world: World, *pools: tuple[str, int]) -> None:
    """NodePools beside the samples' own (gpu-training) that admit its pods, each with its weight."""
    for name, weight in pools:
        pool = nodepool(name, capacity_types=("on-demand",))
        pool["spec"]["weight"] = weight
        world.sim.create(pool)


def record_of(world: World) -> dict[str, str]:
    notes = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]
    return {k: v for k, v in notes.items() if k.startswith("gpuwarden.io/replacement")}


def still_there(world: World) -> None:
    """A trainer not yet drained: what the next replacement is sized for."""
    world.sim.create(training_pod("late-0", world.node(NODE_OF_SAMPLES), gpus=2, checkpoint="annotate"))


def test_a_replacement_that_did_not_launch_is_replaced_in_the_next_pool_by_weight(world: World) -> None:
    # Given two other pools that admit the pods (weights 10 and 50) and a trainer still on the node
    tiers_of(world, ("gpu-od-low", 10), ("gpu-od-high", 50))
    result = spot_warned(world)
    first = record_of(world)["gpuwarden.io/replacement"].removeprefix("nodeclaim/")
    still_there(world)
    # When Karpenter marks the node's own pool's replacement Launched=False
    not_launched(world, first)
    actions = next_round(world, result)
    # Then the failed claim is deleted and the next NodeClaim comes from the heavier other pool
    (again,) = [a for a in actions if a["type"] == "replacement"]
    assert again["reason"].startswith(f"attempt 2 of 3: NodeClaim {first} did not launch (InsufficientCapacity")
    assert f"NodePool gpu-training: NodeClaim {first} did not launch there" in again["reason"]
    assert world.sim.get("NodeClaim", first) is None
    second = again["target"].removeprefix("nodeclaim/")
    claim = world.sim.get("NodeClaim", second)
    assert claim is not None
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-od-high"
    assert claim["metadata"]["annotations"][HOLD] == "true"
    assert record_of(world) == {
        "gpuwarden.io/replacement": f"nodeclaim/{second}",
        "gpuwarden.io/replacement-pool": "gpu-od-high",
        "gpuwarden.io/replacement-failed": f"gpu-training/{first}",
    }
    # a round that finds the new claim well launches nothing more
    assert [a for a in next_round(world, result) if a["type"].startswith("replacement")] == []


def test_when_every_pool_fails_the_attempts_run_out_recorded_and_the_drain_still_finishes(world: World) -> None:
    tiers_of(world, ("gpu-od-low", 10), ("gpu-od-high", 50))
    result = spot_warned(world)
    first = record_of(world)["gpuwarden.io/replacement"].removeprefix("nodeclaim/")
    still_there(world)
    # own pool: Launched=False; the next (gpu-od-high): deleted by Karpenter, as its launch
    # controller does on InsufficientCapacityError; the last (gpu-od-low): Launched=False
    not_launched(world, first)
    (second,) = [
        a["target"].removeprefix("nodeclaim/") for a in next_round(world, result) if a["type"] == "replacement"
    ]
    world.sim.delete_direct("NodeClaim", second)
    (third,) = [a for a in next_round(world, result) if a["type"] == "replacement"]
    assert third["reason"].startswith(f"attempt 3 of 3: NodeClaim {second} is gone (deleted by Karpenter")
    assert f"NodePool gpu-od-high: NodeClaim {second} did not launch there" in third["reason"]
    last = third["target"].removeprefix("nodeclaim/")
    assert world.sim.get("NodeClaim", last)["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-od-low"  # type: ignore[index]
    not_launched(world, last)
    # When the next round reads it: the attempts are used up, the failure recorded with every claim
    state = DrainState.model_validate({**result["drain"], "done": False})
    recorder = Recorder(world.deps(), result["event_id"])
    later = drain_to_end(recorder, state, spec_of(Kind.SPOT_INTERRUPTION).hooks)
    (failed,) = [a for a in recorder.actions if a["type"] == "replacement-failed"]
    assert failed["reason"] == (
        f"NodeClaim {last} did not launch (InsufficientCapacity: all requested instance types were unavailable "
        "during launch); 3 of replacement.attempts 3 used"
    )
    assert world.sim.get("NodeClaim", last) is None
    assert record_of(world) == {
        "gpuwarden.io/replacement-failed": f"gpu-training/{first},gpu-od-high/{second},gpu-od-low/{last}"
    }
    # Then the drain does not wait on its replacement: it finishes
    assert later.state.done
    assert "drain-complete" in [a["type"] for a in recorder.actions]
    assert [a for a in next_round(world, result) if a["type"].startswith("replacement")] == []


def test_with_no_other_pool_left_the_failure_names_each_pools_reason(world: World) -> None:
    result = spot_warned(world)
    first = record_of(world)["gpuwarden.io/replacement"].removeprefix("nodeclaim/")
    still_there(world)
    not_launched(world, first)
    (failed,) = [a for a in next_round(world, result) if a["type"] == "replacement-failed"]
    assert failed["reason"].endswith(
        f"no NodePool can take the replacement: NodePool gpu-training: NodeClaim {first} did not launch there"
    )
    assert record_of(world) == {"gpuwarden.io/replacement-failed": f"gpu-training/{first}"}


def test_attempts_are_bounded_by_the_policy(world: World) -> None:
    two = Policy.model_validate({"cluster": "ml-prod", "replacement": {"attempts": 2}})
    tiers_of(world, ("gpu-od-low", 10), ("gpu-od-high", 50))
    result = spot_warned(world, two)
    first = record_of(world)["gpuwarden.io/replacement"].removeprefix("nodeclaim/")
    still_there(world)
    not_launched(world, first)
    (again,) = [a for a in next_round(world, result, two) if a["type"] == "replacement"]
    not_launched(world, again["target"].removeprefix("nodeclaim/"))
    (failed,) = [a for a in next_round(world, result, two) if a["type"] == "replacement-failed"]
    assert "2 of replacement.attempts 2 used" in failed["reason"]
    assert "gpuwarden.io/replacement" not in record_of(world)
    assert [a for a in next_round(world, result, two) if a["type"].startswith("replacement")] == []


def test_a_replacement_karpenter_deleted_is_chosen_again_in_the_next_pool_for_the_pods_still_on_the_node(
    world: World,
) -> None:
    tiers_of(world, ("gpu-od-high", 50))
    result = spot_warned(world)
    first = record_of(world)["gpuwarden.io/replacement"].removeprefix("nodeclaim/")
    # Given a trainer still on the node (not yet drained), and the first replacement gone: deleted by
    # Karpenter, or never created (the mark names it before the create; an outage can cut that)
    still_there(world)
    world.sim.delete_direct("NodeClaim", first)
    # When the next round reads the replacement
    (again,) = [a for a in next_round(world, result) if a["type"] == "replacement"]
    # Then it is launched again for the pods still there, held, its own pool not left out on a
    # disappearance alone
    assert again["reason"].startswith(f"attempt 2 of 3: NodeClaim {first} is gone (deleted by Karpenter")
    second = again["target"].removeprefix("nodeclaim/")
    claim = world.sim.get("NodeClaim", second)
    assert claim is not None
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-training"
    assert claim["metadata"]["annotations"][HOLD] == "true"
    # And when Karpenter deletes the claim it launched itself, the next pool is chosen
    world.sim.delete_direct("NodeClaim", second)
    (third,) = [a for a in next_round(world, result) if a["type"] == "replacement"]
    assert third["reason"].startswith(f"attempt 3 of 3: NodeClaim {second} is gone (deleted by Karpenter")
    claim = world.sim.get("NodeClaim", third["target"].removeprefix("nodeclaim/"))
    assert claim is not None
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-od-high"


def test_a_deleted_replacement_with_nothing_left_to_move_is_recorded_not_relaunched(world: World) -> None:
    result = spot_warned(world)
    first = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]["gpuwarden.io/replacement"].removeprefix(
        "nodeclaim/"
    )
    world.sim.delete_direct("NodeClaim", first)
    (failed,) = [a for a in next_round(world, result) if a["type"] == "replacement-failed"]
    assert "is gone (deleted by Karpenter, or never created); no pod is left on the node" in failed["reason"]
    assert [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")] == []


# --------------------------------------------------------------------------- requests per round


def node_gets(world: World, since: int) -> int:
    path = f"/api/v1/nodes/{NODE_OF_SAMPLES}"
    return sum(1 for r in world.sim.requests[since:] if r.method == "GET" and r.path == path)


def test_a_drain_round_reads_the_node_once_beside_its_replacement(world: World) -> None:
    # Given a drain handed to the workflow with a trainer still on the node (a middle round)
    result = spot_warned(world)
    still_there(world)
    since = len(world.sim.requests)
    state = DrainState.model_validate({**result["drain"], "done": False})
    hooks = spec_of(Kind.SPOT_INTERRUPTION).hooks
    middle = round_of(Recorder(world.deps(), result["event_id"]), state, hooks)
    # Then following the replacement and draining share one GET of the node (was 2)
    assert not middle.state.done
    assert node_gets(world, since) == 1
    # And the last round (the replacement's hold looked at too) reads it once as well (was 3)
    world.sim.delete_direct("Pod", "late-0", "ml", grace_seconds=0)
    since = len(world.sim.requests)
    last = round_of(Recorder(world.deps(), result["event_id"]), middle.state, hooks)
    assert last.state.done
    assert node_gets(world, since) == 1


def test_runbook_status_on_the_held_replacement_says_it_is_gpuwardens(world: World) -> None:
    from tests.integration.inputs import runbook

    claim = launched(world)
    register(world, claim)
    # When the on-call engineer asks for the replacement's status
    held = runbook(world, action="status", node=NEW_NODE)
    # Then it names what it is and until when gpuwarden holds it (was: "not held by gpuwarden")
    assert f"gpuwarden's replacement for {NODE_OF_SAMPLES}" in held["reason"], held["reason"]
    assert f"held with {HOLD} until {claim['metadata']['annotations'][UNTIL]}" in held["reason"]
    # and once the hold is taken back, says so
    world.sim.clock.advance(16 * 60)
    reconcile(world)
    assert "its hold taken back" in runbook(world, action="status", node=NEW_NODE)["reason"]
