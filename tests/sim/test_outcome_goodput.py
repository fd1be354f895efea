"""Goodput in the outcome runs (docs/simulate.md#goodput): restarts that cost time, ETTR per arm and
per multi-node job, the week with no incident, and the built-in week as the seeds configure it.

The runs are those of test_outcome_gangs (four Spot p4d nodes, one four-rank DDP job, a Spot
warning at 50:00 for rank 1's node, 0.1 days = 8,640 s) and test_outcome_expiry (one fine-tuning
pod on a node Karpenter expires at 50:00)."""

from __future__ import annotations

import pytest

from sim.outcome.goodput import JobClock
from sim.outcome.multinode import figures as multinode_figures
from sim.outcome.runner import Arm, run_arm
from sim.outcome.scenario import load_scenario
from tests.sim.outcome_scenarios import AGES, DDP_GPUS, arm, ddp, expiring

WALL = 0.1 * 86400


def test_a_restart_costs_the_job_its_overhead_once_every_rank_runs_again() -> None:
    # Given the four-rank job restarted by Karpenter alone (rank 1's node gone, a new one launched)
    with_overhead = arm(ddp(restart_overhead_seconds=300), Arm.KARPENTER)
    without = arm(ddp(restart_overhead_seconds=0), Arm.KARPENTER)
    # Then the restart cost every rank 300 s before the job trained again, counted apart from the
    # work lost, and the job's ETTR is lower by exactly that share of the run
    assert with_overhead.figures["restart_overhead_gpu_minutes"] == pytest.approx(DDP_GPUS * 5, abs=0.1)
    assert without.figures["restart_overhead_gpu_minutes"] == 0
    assert with_overhead.figures["training_gpu_minutes_lost"] == without.figures["training_gpu_minutes_lost"]
    assert without.figures["ettr"] - with_overhead.figures["ettr"] == pytest.approx(300 / WALL, abs=2e-4)
    assert multinode_figures(with_overhead)["ettr_per_job"] == {"ddp-00": with_overhead.figures["ettr"]}


def test_the_week_with_no_incident_is_all_goodput_and_every_arm_is_below_it() -> None:
    baseline = run_arm(ddp(), Arm.BASELINE, [], days=0.1)
    assert baseline.figures["ettr"] == 1.0
    assert baseline.figures["job_restarts"] == 0
    for which in (Arm.NOTHING, Arm.KARPENTER, Arm.GPUWARDEN):
        result = arm(ddp(), which)
        # a restart (a rank's node is gone in every arm) costs at least its overhead and the wait for a node
        assert result.figures["job_restarts"] == 1, which
        assert result.figures["ettr"] < 1 - 300 / WALL, which


def test_a_requested_checkpoint_pauses_training_and_the_pause_is_not_goodput() -> None:
    result = arm(ddp(), Arm.GPUWARDEN)
    # gpuwarden asked rank 0 for the job's checkpoint: training paused for the 60 s write
    assert result.figures["checkpoint_pause_gpu_minutes"] == pytest.approx(DDP_GPUS * 1, abs=0.2)


def test_a_clock_counts_training_after_the_overhead_and_without_pauses() -> None:
    clock = JobClock(gpus=8)
    clock.begin(0, 300)  # the first start: the job ran before the run began
    clock.pause(100)
    clock.resume(160)
    clock.end(1000)
    clock.begin(1500, 300)  # a restart: 300 s before it trains
    clock.end(1700)  # stopped again during its overhead
    assert (clock.trained, clock.paused, clock.overhead, clock.starts) == (1000, 60, 200, 2)


def test_karpenter_leaves_a_do_not_disrupt_pod_on_its_expired_node() -> None:
    # Given the fine-tuning pod with karpenter.sh/do-not-disrupt on a node that expires at 50:00,
    # no terminationGracePeriod (as the seeds)
    doc = expiring().model_dump(mode="json")
    doc["training"][0]["do_not_disrupt"] = True
    from sim.outcome.scenario import Scenario

    result = run_arm(Scenario.model_validate(doc), Arm.KARPENTER, [], days=1, ages=AGES)
    # Then Karpenter deletes the NodeClaim at its expiry but its drain never evicts the pod: nothing
    # lost in the day (its eviction queue holds the pod for 23 hours, backing off at most 10 s, and
    # the driver is not woken for a held pod: a day takes a few thousand steps)
    assert result.figures["nodes_expired_by_karpenter"] >= 1
    assert result.engine_steps < 5000
    # and launches no node for it (`IsCurrentlyReschedulable`): none for consolidation to take again
    assert result.figures["replacements_launched"] == 0
    assert result.figures["training_gpu_minutes_lost"] == 0
    assert result.figures["ettr"] == 1.0


def test_the_builtin_week_is_configured_as_the_seeds_configure_theirs() -> None:
    scenario = load_scenario()
    pools = {p.name: p for p in scenario.pools}
    assert pools["gpu-training"].expire_after_hours == 720
    assert {"nodes": "0", "reasons": ["Underutilized", "Empty"]} in (pools["gpu-training"].budgets or [])
    assert any(b.get("schedule") and b["nodes"] == "0" for b in pools["gpu-training"].budgets or [])
    assert pools["gpu-finetune-spot"].expire_after_hours == 336
    assert all(t.do_not_disrupt for t in scenario.training)
    ddp_job = next(t for t in scenario.training if t.name == "ddp-indexed")
    assert (ddp_job.nodes_per_job, ddp_job.grace_seconds) == (4, 300)
    # a requested checkpoint that is written is waited for: no timeout below its write
    for training in scenario.training:
        assert (training.checkpoint_timeout_seconds or 0) > training.checkpoint_seconds, training.name
    assert scenario.restart_overhead_seconds > 0
    # and `simulate --json` says so, for a reader of the document (`setup`)
    setup = scenario.setup()
    assert setup["pools"]["gpu-training"]["expire_after_hours"] == 720
    assert setup["pools"]["gpu-finetune-spot"]["expire_after_hours"] == 336
    assert all(job["do_not_disrupt"] and job["restart_overhead_seconds"] > 0 for job in setup["training"].values())


def test_the_cluster_ten_times_over() -> None:
    scenario = load_scenario().scaled(10)
    assert sum(p.nodes for p in scenario.pools) == 10 * sum(p.nodes for p in load_scenario().pools) == 740
    assert sum(t.jobs for t in scenario.training) == 10 * sum(t.jobs for t in load_scenario().training)
