"""Inside Lambda every wait is cut to the invocation's remaining time minus a margin; what does
not fit goes to the drain workflow (handlers/_runtime.time_budget, Deps.remaining)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.handlers._runtime import SAFETY_MARGIN_SECONDS, time_budget
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch, handle_runbook
from gpuwarden.services.engine.context import Deps
from gpuwarden.sources import parse_runbook
from sim.apiserver.exec_ws import ExecResult
from sim.builders import gpu_node, job, training_pod
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import INSTANCE, NODE

TRAINER = "ml/train-worker"
#: Seconds the fake invocation has left when it starts: 4 s to wait after the margin.
INVOCATION_SECONDS = SAFETY_MARGIN_SECONDS + 4


class FakeContext:
    """Lambda's context: only its clock matters here."""

    def __init__(self, seconds: float) -> None:
        self._until = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._until - time.monotonic()) * 1000)


@pytest.fixture
def hanging_checkpoint(world: World) -> Iterator[None]:
    """A trainer whose `exec:` checkpoint (600 s timeout) runs far longer than the invocation."""
    node = world.sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    owner = world.sim.create(job("train", "ml"))
    world.sim.create(
        training_pod("train-worker", node, checkpoint="exec:/bin/checkpoint", checkpoint_timeout=600, owner=owner)
    )
    released = threading.Event()

    def hang(_: Any) -> ExecResult:
        released.wait(60)
        return ExecResult(0)

    world.sim.exec_handler = hang
    yield
    released.set()


def deployed(world: World, context: FakeContext, started: list[dict[str, Any]]) -> Deps:
    return replace(world.deps(), remaining=time_budget(context), start_drain=started.append)


def trainer_annotations(world: World) -> dict[str, str]:
    pod = world.pod(TRAINER)
    assert pod is not None
    return dict(pod["metadata"].get("annotations") or {})


@pytest.mark.usefixtures("hanging_checkpoint")
def test_a_checkpoint_delivery_longer_than_the_invocation_is_cut_and_left_to_the_drain_workflow(
    world: World,
) -> None:
    # Given an invocation with 4 s to wait and a Spot warning for a node whose trainer checkpoints for minutes
    context, started = FakeContext(INVOCATION_SECONDS), list[dict[str, Any]]()
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    # When the deployed interruption function handles it
    result = handle_batch(parse_notices(event), deployed(world, context, started), drain_locally=False).to_json()
    # Then it answered before its timeout, with the drain workflow started and the delivery cut, not failed
    assert context.get_remaining_time_in_millis() > 0
    assert result["outcome"] == "handled", result["reason"]
    assert len(started) == 1
    assert started[0]["done"] is False
    annotations = trainer_annotations(world)
    assert annotations[ann.CHECKPOINT_EVENT] == event["id"]
    assert ann.CHECKPOINT_FAILED not in annotations  # the workflow waits for the ack until its deadline
    assert world.pod(TRAINER) is not None


@pytest.mark.usefixtures("hanging_checkpoint")
def test_a_runbook_drain_hands_what_does_not_fit_to_the_drain_workflow(world: World) -> None:
    # Given an invocation with 4 s to wait and a node whose trainer checkpoints for minutes
    context, started = FakeContext(INVOCATION_SECONDS), list[dict[str, Any]]()
    request = parse_runbook({"action": "drain", "node": NODE, "reason": "budget test"})
    # When the deployed runbook function drains it
    result = handle_runbook(request, deployed(world, context, started), drain_locally=False).to_json()
    # Then its first rounds stopped at the budget and the drain workflow took over where they stopped
    assert context.get_remaining_time_in_millis() > 0
    assert result["outcome"] == "handled", result["reason"]
    assert "the drain workflow continues" in result["reason"]
    assert [s["node"] for s in started] == [NODE]
    assert started[0]["done"] is False
    assert ann.CHECKPOINT_FAILED not in trainer_annotations(world)


def test_outside_lambda_there_is_no_budget(world: World) -> None:
    # Given the deps of a local run (the CLI), and those of an invocation already past its margin
    local = world.deps()
    late = replace(local, remaining=time_budget(FakeContext(SAFETY_MARGIN_SECONDS - 1)))
    # Then a local wait is as long as asked, and a late invocation waits no more
    assert time_budget(object()) is None
    assert local.time_left(30.0) == 30.0
    assert not local.out_of_time
    assert late.time_left(30.0) == 0.0
    assert late.out_of_time
