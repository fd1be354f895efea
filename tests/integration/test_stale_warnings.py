"""Stale warnings (docs/events.md, "Stale warnings"): a loss warning more than 10 minutes past its
own deadline, for a node that is still there, is a replay (a dead-letter redrive, a copied
sample): ignored, the reason saying `stale` and naming both times, nothing written. Within those
10 minutes it is handled as usual, as fast as the time left allows, and its answer says what the
late start cost. The warnings: events/spot-interruption.json, stamped where the test says."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import spot_node

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def late_warning(world: World, late: timedelta) -> dict[str, Any]:
    """The sample warning, its deadline (time + 120 s) ``late`` before now."""
    sent = world.sim.clock.now() - late - timedelta(seconds=120)
    return load_event("spot-interruption.json", time=rfc3339(sent))


def test_a_day_old_spot_warning_for_a_ready_node_is_stale_and_writes_nothing(world: World) -> None:
    # Given a Ready Spot node with opted-in trainers behind a PDB
    scenario = spot_node(world.sim)
    before = len(world.sim.requests)

    # When a warning whose deadline passed a day ago arrives (a redrive, a copied sample)
    result = handle_batch(parse_notices(late_warning(world, timedelta(days=1))), world.deps()).to_json()

    # Then it is ignored as stale, naming both times, and nothing is written
    assert result["outcome"] == "ignored", result
    assert result["kind"] == "spot-interruption"
    assert result["reason"].startswith("stale:"), result["reason"]
    assert "1d 0h 0min" in result["reason"]
    assert result["reason"].count("T") >= 2  # the deadline and the time it was handled, RFC 3339
    assert [r for r in world.sim.requests[before:] if r.method in WRITES] == []
    assert not world.node(scenario.node)["spec"].get("unschedulable")
    for key in scenario.trainers.values():
        assert world.pod(key) is not None, key


def test_a_warning_five_minutes_past_its_deadline_is_handled_and_says_what_was_not_checkpointed(
    world: World,
) -> None:
    # Given the same node
    scenario = spot_node(world.sim)

    # When a warning arrives five minutes after its deadline (within the ten)
    result = handle_batch(parse_notices(late_warning(world, timedelta(minutes=5))), world.deps()).to_json()

    # Then it is handled at once, and the answer is truthful about the late start
    assert result["outcome"] == "handled", result
    assert not result["reason"].rstrip().endswith(":"), result["reason"]
    drain = result.get("drain") or {}
    # the signal and annotate trainers never checkpointed (the exec one may have: its command exits 0
    # at once, if its exec ran before the round looked)
    never = {scenario.trainers["signal"], scenario.trainers["annotate"]}
    missing = set(drain.get("not_checkpointed") or [])
    assert never <= missing <= set(scenario.trainers.values()), drain
    blocked = [a for a in result["actions"] if a["type"] == "drain-blocked"]
    assert blocked, result["actions"]
    assert all(k in blocked[-1]["reason"].split("not checkpointed: ")[1] for k in never)
    assert world.node(scenario.node)["spec"]["unschedulable"] is True
