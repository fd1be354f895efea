"""The deployed entry points called as Lambda calls them: the interruption handler starts the drain
workflow (a moto Step Functions state machine) and the drain handler is driven as its loop would.

The handlers keep real time (their own clock), so the simulator runs at speed 1 here and the
pods' grace periods are 1 s."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest

from gpuwarden.adapters.stepfunctions import execution_name
from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.handlers import drain as drain_handler
from gpuwarden.handlers import interruption as interruption_handler
from sim.clock import rfc3339
from tests.integration.conftest import LambdaContext, World, load_event
from tests.integration.lambda_env import executions, sim, state_machine
from tests.integration.scenarios import Scenario, spot_node

__all__ = ["sim", "state_machine"]


def cluster(world: World) -> Scenario:
    return spot_node(world.sim, modes=("annotate", "signal:SIGUSR1"), inference=1, pdb_min_available=None, grace=1)


def spot_now(world: World) -> dict[str, Any]:
    return load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))


def test_interruption_handler_cordons_signals_and_starts_one_drain_execution(world: World, state_machine: str) -> None:
    # Given a Spot node with opted-in trainers
    scenario = cluster(world)
    event = spot_now(world)
    # When the Spot warning is delivered to the handler, twice
    first = interruption_handler.handler(event, LambdaContext())
    second = interruption_handler.handler(event, LambdaContext())
    # Then the first cordoned, signalled and handed the drain to ONE execution; the second was a duplicate
    assert first["outcome"] == "handled", first["reason"]
    assert second["outcome"] == "duplicate", second["reason"]
    json.dumps(first)  # the answer is JSON
    seen = [a["type"] for a in first["actions"]]
    assert seen[0] == "cordon"
    assert "signal" in seen
    assert seen.count("checkpoint-requested") == 2
    assert world.node(scenario.node)["spec"]["unschedulable"] is True
    started = executions(state_machine)
    assert len(started) == 1
    assert started[0]["name"] == execution_name(first["drain"])
    stepfunctions = boto3.client("stepfunctions", region_name="us-west-2")
    execution_input = json.loads(stepfunctions.describe_execution(executionArn=started[0]["executionArn"])["input"])
    assert execution_input["event_id"] == event["id"]
    assert execution_input["node"] == scenario.node


def test_drain_handler_driven_like_the_state_machine_reaches_done(world: World, state_machine: str) -> None:
    # Given the drain state the interruption handler handed to the workflow
    scenario = cluster(world)
    state = interruption_handler.handler(spot_now(world), LambdaContext())["drain"]
    assert state["done"] is False
    # When the drain handler is called with each state it returns, as the Wait → drain → done? loop does
    waits: list[object] = []
    for _ in range(40):
        state = drain_handler.handler(state, LambdaContext(function_name="gpuwarden-drain"))
        waits.append(state["wait_seconds"])
        if state["done"]:
            break
        time.sleep(0.25)
    # Then it reaches done with the node drained, and every wait it asked for is a whole number >= 1
    assert state["done"] is True, state
    assert state["outcome"] == "drained"
    assert all(isinstance(w, int) and w >= 1 for w in waits), waits
    for key in [*scenario.trainers.values(), *scenario.inference]:
        assert world.pod(key) is None, key
    assert "gpuwarden.io/drain-completed" in world.node(scenario.node)["metadata"]["annotations"]


def test_malformed_event_raises_invalid_event_for_the_dead_letter_queue(world: World, state_machine: str) -> None:
    # Given a Spot warning that names no instance (no instance id, none in `resources`)
    cluster(world)
    event = load_event("spot-interruption.json", detail={"instance-action": "terminate"})
    event["resources"] = []
    # When it is delivered to the handler
    with pytest.raises(InvalidEvent):
        interruption_handler.handler(event, LambdaContext())
    # Then nothing was touched and no drain started
    assert [r for r in world.sim.requests if r.method != "GET"] == []
    assert executions(state_machine) == []


def test_interruption_handler_counts_the_event_by_kind_and_outcome(
    world: World, state_machine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a Spot node
    cluster(world)
    # When the warning is delivered
    interruption_handler.handler(spot_now(world), LambdaContext())
    # Then an EMF document counts it under Events{kind, outcome, service} (the dashboard's widget)
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    events = [d for d in documents if "Events" in d]
    assert len(events) == 1
    assert events[0]["kind"] == "spot-interruption"
    assert events[0]["outcome"] == "handled"
    assert events[0]["service"] == "gpuwarden"
    assert sorted(events[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == ["kind", "outcome", "service"]
