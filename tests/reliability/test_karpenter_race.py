"""gpuwarden beside Karpenter's interruption queue: the race both ways, duplicates, crashes, and
(make test-long) randomized interleavings. See karpenter_race.py for the invariant."""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from typing import Any

import pytest

from tests.reliability.karpenter_race import Outcome, Race, run_race
from tests.replay import artifacts_root, note

pytestmark = pytest.mark.usefixtures("aws")

TRAINERS = ["ml/train-0-worker", "ml/train-1-worker", "ml/train-2-worker"]
#: The clock speed of scenes that assert an order between Karpenter and a timeout (Race.speed)
SLOW = 4.0


def actions(out: Outcome, type_: str) -> list[dict[str, Any]]:
    return [a for r in out.results for a in r.get("actions", []) if a["type"] == type_]


def test_karpenter_first_nodeclaim_already_deleting_gpuwarden_protects_trainers_leaves_the_replacement() -> None:
    # Given Karpenter received the warning first: the NodeClaim is deleting, its drain about to start
    out = run_race(Race(seed=1, karpenter_at=0, karpenter_lags=True))
    # Then gpuwarden asked and checkpointed every trainer before anyone removed it (checked in run_race)
    assert sorted(out.checkpointed) == TRAINERS
    assert out.taken_before_mark == []
    # and launched nothing: Karpenter's provisioner replaces the capacity, once
    skipped = actions(out, "replacement-skipped")
    assert skipped, out.describe()
    assert skipped[0]["reason"].startswith("left to Karpenter"), skipped
    assert actions(out, "replacement") == []
    assert len(out.replacements) == 1
    assert out.node_gone


def test_karpenter_strictly_first_cannot_take_a_pod_whose_template_says_do_not_disrupt() -> None:
    # Given Karpenter has already run its first drain pass, and every trainer's template carries do-not-disrupt
    out = run_race(Race(seed=2, karpenter_at=0, karpenter_settles_first=True, dnd_template=(0, 1, 2)))
    assert out.taken_before_mark == []
    assert sorted(out.checkpointed) == TRAINERS
    assert len(out.replacements) == 1


def test_karpenter_strictly_first_takes_unprotected_pods_and_gpuwarden_says_so() -> None:
    out = run_race(Race(seed=3, karpenter_at=0, karpenter_settles_first=True))
    # Karpenter evicted them before gpuwarden existed for this node: counted, and in the result
    assert sorted(out.taken_before_mark) == TRAINERS
    assert len(out.replacements) <= 1


def test_gpuwarden_first_karpenter_a_few_hundred_ms_behind_launches_no_second_replacement() -> None:
    out = run_race(Race(seed=4, karpenter_at=None, karpenter_after=0.3))
    assert sorted(out.checkpointed) == TRAINERS
    launched = actions(out, "replacement")
    assert len(launched) == 1, out.describe()
    # Karpenter counted gpuwarden's in-flight NodeClaim as capacity for the displaced pods
    assert out.replacements == [launched[0]["target"].removeprefix("nodeclaim/")]
    assert out.node_gone


@pytest.mark.parametrize("at", [3, 6, 10, 16])
def test_karpenter_arriving_between_gpuwarden_calls_keeps_the_invariant(at: int) -> None:
    out = run_race(Race(seed=10 + at, karpenter_at=at))
    assert len(out.replacements) <= 1  # gpuwarden's, or Karpenter's (none when the pods fit elsewhere)


def test_karpenter_finishing_the_node_while_gpuwarden_drains_is_reported_as_gone_early() -> None:
    # Given a trainer that tolerates every taint (karpenter.sh/disrupted too): Karpenter's drain does not
    # wait for it, so Karpenter terminates the node while the trainer is still checkpointing (silent here)
    out = run_race(
        Race(
            seed=5,
            karpenter_at=0,
            karpenter_lags=True,
            silent=(2,),
            checkpoint_timeout=60,
            tolerate_all=(2,),
            speed=SLOW,
        )
    )
    # Then gpuwarden's run is handled, its drain gone early, and it names what was and was not checkpointed
    result = out.results[0]
    assert result["outcome"] == "handled", result
    drain = result["drain"]
    assert drain["outcome"] == "gone-early", drain
    assert sorted(drain["checkpointed"]) == TRAINERS[:2]
    assert drain["not_checkpointed"] == [TRAINERS[2]]
    assert [a for a in result["actions"] if a["type"] == "node-gone"]
    assert out.lost_with_node == [TRAINERS[2]]


def test_a_termination_grace_period_shorter_than_the_checkpoint_lets_karpenter_take_the_pod() -> None:
    # Given a NodePool terminationGracePeriod shorter than a silent trainer's checkpoint timeout (what
    # `gpuwarden doctor` warns about): Karpenter force-deletes it at that time, do-not-disrupt or not
    race = Race(
        seed=6,
        karpenter_at=0,
        karpenter_lags=True,
        silent=(2,),
        checkpoint_timeout=60,
        termination_grace="40s",
        speed=SLOW,
    )
    with pytest.raises(AssertionError, match=r"worker removed at .* before its ack"):
        run_race(race)  # the invariant cannot hold with that configuration, and the check says which pod


def test_duplicate_delivery_beside_karpenter_acts_once() -> None:
    out = run_race(Race(seed=7, karpenter_at=8, duplicate_at=4))
    outcomes = Counter(r["outcome"] for r in out.results)
    assert outcomes["handled"] == 1, outcomes
    assert len(out.replacements) <= 1


@pytest.mark.parametrize("crash_at", [2, 5, 9, 14])
def test_a_crash_between_steps_then_redelivery_keeps_the_invariant(crash_at: int) -> None:
    out = run_race(Race(seed=20 + crash_at, karpenter_at=7, crash_at=crash_at))
    assert out.results[0]["outcome"] == "crashed"
    assert out.results[-1]["outcome"] in ("handled", "duplicate")


# --------------------------------------------------------------------------- randomized (make test-long)

RUNS = int(os.environ.get("GPUWARDEN_RACE_RUNS", "120"))
#: The first interleaving's seed: the session's seed (tests/replay.py; random unless
#: GPUWARDEN_TEST_SEED is set), so each `make test-long` draws other interleavings
FIRST = int(os.environ.get("GPUWARDEN_TEST_SEED") or "1000") % 2**31
#: One JSON line per randomized run (what it was, what happened): the numbers of the note
SUMMARY = artifacts_root() / "karpenter-race.jsonl"


@pytest.mark.long
@pytest.mark.parametrize("seed", range(FIRST, FIRST + RUNS))
def test_randomized_interleavings_of_gpuwarden_and_karpenter_keep_the_invariant(seed: int) -> None:
    race = Race.random(seed)
    note(race_seed=seed, race=dataclasses.asdict(race), replay=f"run_race(Race.random({seed}))")
    out = run_race(race)  # an AssertionError names the seed and the whole interleaving
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    line = {
        "seed": seed,
        "karpenter_at": race.karpenter_at,
        "karpenter_first": race.karpenter_settles_first,
        "queue": race.queue,
        "duplicate": race.duplicate_at is not None,
        "crash": race.crash_at is not None,
        "replacements": len(out.replacements),
        "gpuwarden_replacement": [r.get("replacement") for r in out.results],
        "checkpointed": len(out.checkpointed),
        "taken_before_mark": len(out.taken_before_mark),
        "lost_with_node": len(out.lost_with_node),
        "node_gone": out.node_gone,
        "drain": [(r.get("drain") or {}).get("outcome") for r in out.results],
        "outcomes": [r.get("outcome") for r in out.results],
    }
    with SUMMARY.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
