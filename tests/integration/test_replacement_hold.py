"""The replacement's karpenter.sh/do-not-disrupt hold (docs/cluster.md, "Replacement capacity"),
through the real services against the simulator + moto: written with the NodeClaim, taken back by
the periodic reconcile once its pods run there or `replacement.hold_minutes` have passed, from the
NodeClaim and its node, and only gpuwarden's own.

The simulator's Karpenter does not launch a NodeClaim gpuwarden creates; each test registers its
node as Karpenter's registration does (the node named in status.nodeName, the claim's annotations
copied). That Karpenter honours the hold is shown on the real plane (tests/e2e/test_rebalance_scene.py).
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
from gpuwarden.services.engine.pipeline import round_of
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
    assert "1 replacement hold(s) released" in result["reason"]
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


def test_a_replacement_that_did_not_launch_is_launched_again_and_recorded(world: World) -> None:
    result = spot_warned(world)
    first = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]["gpuwarden.io/replacement"].removeprefix(
        "nodeclaim/"
    )
    not_launched(world, first)
    actions = next_round(world, result)
    again = [a for a in actions if a["type"] == "replacement"]
    assert len(again) == 1
    assert again[0]["reason"].startswith(f"attempt 2 of 3: NodeClaim {first} did not launch (InsufficientCapacity")
    second = again[0]["target"].removeprefix("nodeclaim/")
    claim = world.sim.get("NodeClaim", second)
    assert claim is not None
    original = world.sim.get("NodeClaim", first)
    assert original is not None
    assert claim["spec"]["requirements"] == original["spec"]["requirements"]
    assert claim["metadata"]["annotations"][HOLD] == "true"
    notes = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]
    assert notes["gpuwarden.io/replacement"] == f"nodeclaim/{second}"
    assert notes["gpuwarden.io/replacement-failed"] == first
    # a round that finds the new claim well launches nothing more
    assert [a for a in next_round(world, result) if a["type"].startswith("replacement")] == []


def test_attempts_are_bounded_by_the_policy_and_the_last_failure_is_recorded(world: World) -> None:
    two = Policy.model_validate({"cluster": "ml-prod", "replacement": {"attempts": 2}})
    result = spot_warned(world, two)
    first = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]["gpuwarden.io/replacement"].removeprefix(
        "nodeclaim/"
    )
    not_launched(world, first)
    (again,) = [a for a in next_round(world, result, two) if a["type"] == "replacement"]
    not_launched(world, again["target"].removeprefix("nodeclaim/"))
    actions = next_round(world, result, two)
    (failed,) = [a for a in actions if a["type"] == "replacement-failed"]
    assert "2 of replacement.attempts 2 used" in failed["reason"]
    assert "gpuwarden.io/replacement" not in world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]
    assert [a for a in next_round(world, result, two) if a["type"].startswith("replacement")] == []


def test_a_replacement_karpenter_deleted_is_chosen_again_for_the_pods_still_on_the_node(world: World) -> None:
    result = spot_warned(world)
    first = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]["gpuwarden.io/replacement"].removeprefix(
        "nodeclaim/"
    )
    # Given a trainer still on the node (not yet drained), and Karpenter deleting the replacement
    world.sim.create(training_pod("late-0", world.node(NODE_OF_SAMPLES), gpus=2, checkpoint="annotate"))
    world.sim.delete_direct("NodeClaim", first)
    # When the next round reads the replacement
    (again,) = [a for a in next_round(world, result) if a["type"] == "replacement"]
    # Then a new claim is chosen for the pods still there, held, and the loss is recorded
    assert again["reason"].startswith(f"attempt 2 of 3: NodeClaim {first} was deleted by Karpenter")
    claim = world.sim.get("NodeClaim", again["target"].removeprefix("nodeclaim/"))
    assert claim is not None
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-training"
    assert claim["metadata"]["annotations"][HOLD] == "true"


def test_a_deleted_replacement_with_nothing_left_to_move_is_recorded_not_relaunched(world: World) -> None:
    result = spot_warned(world)
    first = world.node(NODE_OF_SAMPLES)["metadata"]["annotations"]["gpuwarden.io/replacement"].removeprefix(
        "nodeclaim/"
    )
    world.sim.delete_direct("NodeClaim", first)
    (failed,) = [a for a in next_round(world, result) if a["type"] == "replacement-failed"]
    assert "was deleted by Karpenter; no pod is left on the node" in failed["reason"]
    assert [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")] == []
