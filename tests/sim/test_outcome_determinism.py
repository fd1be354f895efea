"""One seed, one answer (docs/simulate.md#one-seed-one-answer): the outcome engine's clock moves only
when every thread doing gpuwarden's work sleeps, whatever the machine's load.

A Capacity Block's drain runs its nodes side by side (`Deps.side_by_side`), each sleeping between
its drain rounds. The engine counts each of those runs as one of its actors; before, they ran in a
thread pool the engine did not see, so the first run to sleep let the clock move while the others
were still at work, and where their later steps fell in simulated time followed the load.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuwarden.services.engine.context import in_threads
from sim.outcome.engine import Engine
from sim.outcome.events import generate
from sim.outcome.runner import Arm, run_arm
from tests.sim.outcome_scenarios import tiny

START = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)


def _block_drain(engine: Engine, side_by_side: Any) -> dict[str, float]:
    """Two nodes' runs: the second is slow (0.3 s of real work) before it reads the clock; each then
    sleeps, the first 10 s and the second 20 s of simulated time."""
    seen: dict[str, float] = {}

    def run(node: int) -> int:
        if node == 1:
            time.sleep(0.3)  # real time the clock must not count: an HTTP round trip under load
        seen[f"node-{node} starts"] = engine.now()
        engine.sleep(10.0 * (node + 1))
        seen[f"node-{node} wakes"] = engine.now()
        return node

    def actor() -> None:
        assert side_by_side(run, [0, 1], 16) == [0, 1]
        seen["the notice's run ends"] = engine.now()

    engine.spawn("block", actor)
    engine.run_until(100.0)
    return seen


def test_the_clock_waits_for_every_run_side_by_side_not_only_the_first_to_sleep() -> None:
    engine = Engine(START)
    # When a block's two nodes are drained side by side through the engine
    seen = _block_drain(engine, engine.side_by_side)
    # Then both start at 0, each wakes at its own sleep's end, and the notice's run ends with the last
    assert seen == {
        "node-0 starts": 0.0,
        "node-1 starts": 0.0,
        "node-0 wakes": 10.0,
        "node-1 wakes": 20.0,
        "the notice's run ends": 20.0,
    }


def test_a_thread_pool_the_engine_does_not_see_lets_the_clock_move_under_the_slow_run() -> None:
    """What the week did before: the product's own pool, unseen by the engine (the witness of the cause)."""
    engine = Engine(START)
    seen = _block_drain(engine, in_threads)
    assert seen["node-1 starts"] == 10.0  # node 0's sleep moved the clock while node 1 was still at work


def test_a_run_that_fails_fails_the_notice_once_the_others_end() -> None:
    engine = Engine(START)
    ended: list[int] = []

    def run(node: int) -> int:
        engine.sleep(5.0)
        if node == 0:
            raise RuntimeError("node 0's run failed")
        ended.append(node)
        return node

    def actor() -> None:
        engine.side_by_side(run, [0, 1, 2], 16)

    engine.spawn("block", actor)
    with pytest.raises(Exception, match="node 0's run failed"):
        engine.run_until(100.0)
    assert sorted(ended) == [1, 2]


def test_a_capacity_blocks_end_gives_the_same_answer_twice_and_loses_nothing() -> None:
    # Given a three-node Capacity Block whose end comes at 1 h 30 min, under gpuwarden: on two nodes a
    # job that writes its checkpoint in 45 s, on the third one that takes 80 s (the three drains sleep
    # apart), each with do-not-disrupt (Karpenter leaves them to gpuwarden's handshake)
    doc = tiny().model_dump(mode="json")
    doc["pools"][0] |= {
        "capacity_type": "reserved",
        "nodes": 3,
        "capacity_block_end_hours": 1.5,
        "capacity_reservation_id": "cr-0123456789abcdef0",
    }
    job = doc["training"][0] | {"do_not_disrupt": True}
    doc["training"] = [job | {"jobs": 2, "checkpoint_seconds": 45}, job | {"name": "big", "checkpoint_seconds": 80}]
    scenario = tiny().model_validate(doc)
    incidents = generate(scenario, 7, 0.1)  # the block's expiration warning, 40 min before its end
    # When the same week runs twice
    first, second = (run_arm(scenario, Arm.GPUWARDEN, incidents, days=0.1) for _ in range(2))
    # Then every figure and every stop are the same, and each pod left once its checkpoint was written
    assert first.failures == second.failures == []
    assert first.figures == second.figures
    stops = [sorted((loss.pod, loss.stopped_at, loss.saved_at) for loss in r.ledger.losses) for r in (first, second)]
    assert stops[0] == stops[1]
    assert first.figures["checkpoints_acked"] == 3
    assert first.figures["training_gpu_minutes_lost"] == 0
