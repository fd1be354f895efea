"""Where the lost GPU-minutes go (sim/outcome/causes.py, docs/simulate.md#causes): each scene is
computed by hand, and every lost GPU-minute of an arm has exactly one cause.

The four-rank job of test_outcome_gangs (p4d, 8 GPUs a rank, a checkpoint every 30 min from t = 0)
and the one-node fine-tuning job of test_outcome; a Spot warning at 50:00, the instance gone at 52:00.
"""

from __future__ import annotations

import pytest

from sim.outcome.causes import MEANING, Cause, attribute, by_cause
from sim.outcome.events import Incident, IncidentKind
from sim.outcome.runner import Arm, ArmResult, run_arm
from sim.outcome.scenario import Scenario
from tests.sim.outcome_scenarios import SPOT, ddp, expiring, spot, tiny


def causes(result: ArmResult) -> dict[str, float]:
    found = by_cause(attribute(result))
    total = result.figures["training_gpu_minutes_lost"]
    assert sum(found.values()) == pytest.approx(total, abs=0.1 * max(len(found), 1))
    return found


def test_a_sharded_checkpoint_is_written_by_a_rank_that_does_not_trap_sigterm() -> None:
    # Given a sharded checkpoint (every rank writes its part, 90 s), ranks that do not trap SIGTERM
    # (grace 60 s), and a Spot warning for rank 2's node: gpuwarden asks every rank at 50:01
    scenario = ddp(checkpoint_writers="all", checkpoint_seconds=90, grace_seconds=60)
    result = run_arm(scenario, Arm.GPUWARDEN, spot(2), days=0.1)
    # When rank 2's own request is still open at deadline - grace (50:58), gpuwarden keeps waiting for
    # it (its part ends at 51:31, before the instance goes at 52:00), then evicts it with what is left
    # Then every part is written and nothing is lost (before the fix: 640 GPU-min cut by gpuwarden)
    assert result.figures["training_gpu_minutes_lost"] == pytest.approx(0, abs=0.1)
    assert causes(result) == {}
    assert MEANING[Cause.CUT_BY_GPUWARDEN][1] is True  # the cause stays: what gpuwarden could have saved


def test_a_checkpoint_longer_than_the_notice_is_that_whoever_asked() -> None:
    # Given a rank-0 checkpoint that takes 120 s, asked 1 s into a 120 s notice
    scenario = ddp(checkpoint_seconds=120, grace_seconds=120, saves_on_sigterm=True, checkpoint_timeout_seconds=120)
    result = run_arm(scenario, Arm.GPUWARDEN, spot(0), days=0.1)
    # Then nothing could save it: the write would end 1 s after the instance is gone
    assert set(causes(result)) == {Cause.WRITE_LONGER_THAN_NOTICE.value}


def test_karpenter_alone_loses_to_sigterm_before_any_checkpoint() -> None:
    result = run_arm(ddp(), Arm.KARPENTER, spot(1), days=0.1)
    assert set(causes(result)) == {Cause.SIGTERM_BEFORE_ASKED.value}


def test_nothing_loses_to_the_instance_that_nobody_handled() -> None:
    result = run_arm(tiny(), Arm.NOTHING, SPOT, days=0.1)
    assert set(causes(result)) == {Cause.UNHANDLED.value}


def test_an_acknowledgement_of_an_earlier_notice_is_no_checkpoint_for_the_next() -> None:
    # Given a rebalance recommendation at 40:00 (gpuwarden prepares: it asks the job, which writes by
    # 41:00 and trains on) and the Spot warning of the same chain at 50:00
    incidents = [
        Incident(40 * 60.0, IncidentKind.REBALANCE, "spot", 0, None, "rebalance-1", "c1"),
        *SPOT,
    ]
    result = run_arm(tiny(), Arm.GPUWARDEN, incidents, days=0.1)
    # When the Spot warning finds the 41:00 acknowledgement, made before its own time (50:00)
    # Then it asks the job again rather than evicting at once on it, and the 9 minutes trained since
    # are saved (before the fix: 36 GPU-min lost to a stale acknowledgement)
    assert result.figures["training_gpu_minutes_lost"] == pytest.approx(0, abs=0.1)
    assert causes(result) == {}


def test_a_job_that_restarts_without_losing_work_is_counted_as_a_restart() -> None:
    # Given gpuwarden asking rank 0 of a DDP job whose checkpoint fits the notice
    result = run_arm(ddp(), Arm.GPUWARDEN, spot(0), days=0.1)
    from sim.outcome.multinode import figures

    # Then the job still restarts (its rank's node is gone), having lost nothing
    mn = figures(result)
    assert (mn["job_restarts"], mn["job_restarts_losing_work"]) == (1, 0)


def test_a_do_not_disrupt_pod_the_expiry_left_and_a_spot_interruption_took_is_lost_to_the_interruption() -> None:
    # Given the fine-tuning pod with do-not-disrupt on a Spot node Karpenter expires at 30:00 (no
    # terminationGracePeriod: its drain leaves the pod) and a Spot warning for that node at 50:00
    doc = expiring(capacity_type="spot").model_dump(mode="json")
    doc["training"][0]["do_not_disrupt"] = True
    ages = {"spot": [2 * 3600.0 - 30 * 60.0]}
    result = run_arm(Scenario.model_validate(doc), Arm.KARPENTER, SPOT, days=0.1, ages=ages)
    # Then the expiry took nothing: Karpenter's interruption drain leaves the pod too, and the
    # instance's end at 52:00 takes it, unhandled (before: counted as karpenter-expiry)
    assert result.figures["nodes_expired_by_karpenter"] == 1
    assert set(causes(result)) == {Cause.UNHANDLED.value}
