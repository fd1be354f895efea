"""`gpuwarden simulate`: each arm on a one-node scenario whose loss is computed by hand.

The scenario: one Spot node (4 GPUs) running one training job that checkpoints every 30 min
(a write takes 60 s) from t = 0. The Spot warning comes at 50:00; the instance is gone at
52:00. The last periodic checkpoint is the one taken at 30:00 (written by 31:00).
"""

from __future__ import annotations

import pytest

from sim.outcome.events import IncidentKind, generate
from sim.outcome.runner import Arm, run, run_arm
from sim.outcome.scenario import Scenario
from tests.sim.outcome_scenarios import GPUS, SPOT, tiny


def lost(scenario: Scenario, arm: Arm) -> float:
    return float(run_arm(scenario, arm, SPOT, days=0.1).figures["training_gpu_minutes_lost"])


def test_nothing_loses_the_work_since_the_last_periodic_checkpoint_until_the_instance_dies() -> None:
    # Given no reactor, When the instance dies at 52:00, Then 52:00 - 30:00 = 22 min x 4 GPUs are lost
    assert lost(tiny(), Arm.NOTHING) == pytest.approx(22 * GPUS, abs=1)


def test_karpenter_alone_sigterms_at_its_reaction_and_a_job_that_cannot_save_loses_until_then() -> None:
    # Given Karpenter's interruption queue (reacts 2 s after the notice), a job that does not save on SIGTERM,
    # Then it stops at 50:02: 20 min 2 s x 4 GPUs
    assert lost(tiny(), Arm.KARPENTER) == pytest.approx((20 * 60 + 2) / 60 * GPUS, abs=1)


def test_karpenter_alone_gives_a_sigterm_aware_job_its_grace_to_save() -> None:
    # Given a job that saves on SIGTERM (60 s) within its 90 s grace, Then nothing is lost
    assert lost(tiny(saves_on_sigterm=True, grace_seconds=90), Arm.KARPENTER) == pytest.approx(0, abs=1)


def test_gpuwarden_beside_karpenter_loses_nothing_for_a_sigterm_aware_job() -> None:
    # Given gpuwarden asks at 50:01 (the job pauses and writes, done 51:01) and Karpenter SIGTERMs at 50:02
    # (the write goes on within the 90 s grace), Then nothing is lost
    assert lost(tiny(saves_on_sigterm=True, grace_seconds=90), Arm.GPUWARDEN) == pytest.approx(0, abs=1)


def test_do_not_disrupt_pod_is_left_to_gpuwarden_which_evicts_after_the_acknowledgement() -> None:
    # Given the job's owner marked it karpenter.sh/do-not-disrupt (Karpenter passes it over, no
    # terminationGracePeriod), When gpuwarden asks at 50:01 and the job acks at 51:01, Then gpuwarden
    # evicts it right after the ack and nothing is lost; without gpuwarden it dies with the instance.
    scenario = tiny(do_not_disrupt=True)
    assert lost(scenario, Arm.GPUWARDEN) == pytest.approx(0, abs=1)
    assert lost(scenario, Arm.KARPENTER) == pytest.approx(22 * GPUS, abs=1)


def test_gpuwarden_arm_counts_the_handshake() -> None:
    result = run_arm(tiny(do_not_disrupt=True), Arm.GPUWARDEN, SPOT, days=0.1)
    assert result.figures["checkpoints_requested"] == 1
    assert result.figures["checkpoints_acked"] == 1
    assert result.figures["nodes_past_deadline"] == 0
    assert result.failures == []


def test_same_seed_same_numbers() -> None:
    doc = tiny().model_dump(mode="json")
    doc["pools"][0]["nodes"], doc["training"][0]["jobs"] = 8, 8
    scenario = Scenario.model_validate(doc)
    incidents = generate(scenario, 3, 30.0)
    assert incidents == generate(scenario, 3, 30.0)
    assert any(i.kind is IncidentKind.SPOT_INTERRUPTION for i in incidents), "seed 3 draws an interruption"
    first = run(scenario, seed=3, days=30.0, arms=(Arm.NOTHING, Arm.KARPENTER))
    second = run(scenario, seed=3, days=30.0, arms=(Arm.NOTHING, Arm.KARPENTER))
    assert first.arms[0].figures["interruptions"] > 0
    assert [r.figures for r in first.arms] == [r.figures for r in second.arms]
