"""A notice whose work is over no longer holds the node against the next loss (docs/cluster.md,
"A finished notice and the next loss").

Seed 7's week: a Capacity Block job with do-not-disrupt ran on a node Karpenter had expired days
before. gpuwarden's expiry drain asked it to checkpoint and left it (it never moves for an expiry);
the drain completed, and its mark stayed. At the block's end the expiration warning found the node
"already being handled for karpenter-expiry" and was ignored, so the job went with its instance,
unasked (240 GPU-minutes in gpuwarden's arm). The scene: one reserved node whose NodeClaim Karpenter
expires at 50:00 (gpuwarden drains from 20:00: checkpoint, the pod stays), the block's warning at
50:00, its instances terminated at 1:00:00.
"""

from __future__ import annotations

from sim.outcome.events import generate
from sim.outcome.runner import Arm, run_arm
from sim.outcome.scenario import Scenario
from tests.sim.outcome_scenarios import AGES, expiring


def _block_on_an_expired_node() -> Scenario:
    doc = expiring().model_dump(mode="json")
    doc["pools"][0] |= {
        "capacity_type": "reserved",
        "capacity_block_end_hours": 1.5,
        "capacity_reservation_id": "cr-0123456789abcdef0",
    }
    doc["training"][0] |= {"do_not_disrupt": True}
    return Scenario.model_validate(doc)


def test_the_blocks_warning_takes_over_a_node_whose_expiry_drain_is_over() -> None:
    scenario = _block_on_an_expired_node()
    # When the week runs under gpuwarden
    result = run_arm(scenario, Arm.GPUWARDEN, generate(scenario, 7, 0.1), days=0.1, ages=AGES)
    # Then the block's warning is handled on the node: the job is asked again, writes, and leaves
    # before its instance goes; nothing is lost
    block = [r for r in result.gpuwarden_results if r.get("kind") == "capacity-block-expiry"]
    assert [r["outcome"] for r in block] == ["handled"]
    asked = [a for a in block[0]["actions"] if a["type"] == "checkpoint-requested"]
    assert [a["pod"] for a in asked] == ["ml/ft-00-0"]
    assert result.figures["training_gpu_minutes_lost"] == 0
    assert result.figures["checkpoints_acked"] == 2  # the expiry's and the block's
