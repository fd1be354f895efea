"""`gpuwarden simulate` with a multi-node job: each arm on a four-node scenario whose loss is
computed by hand.

The scenario: four Spot p4d nodes (8 GPUs each) running one four-rank Indexed Job (DDP: rank 0
writes the checkpoints) that checkpoints every 30 min (a write takes 60 s) from t = 0. A Spot
warning comes at 50:00 for one rank's node; the instance is gone at 52:00. The last periodic
checkpoint is the one taken at 30:00. When one rank stops, all four restart from the job's last
checkpoint: 4 x 8 = 32 GPUs lose the time since then.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.outcome.multinode import figures
from sim.outcome.runner import Arm
from tests.sim.outcome_scenarios import DDP_GPUS, arm, ddp


def test_nothing_loses_every_ranks_work_since_the_jobs_last_checkpoint() -> None:
    # Given no reactor, When rank 1's instance dies at 52:00
    result = arm(ddp(), Arm.NOTHING)
    # Then all four ranks restart from 30:00: 22 min x 32 GPUs
    assert result.figures["training_gpu_minutes_lost"] == pytest.approx(22 * DDP_GPUS, abs=1)
    mn = figures(result)
    assert (mn["ranks_lost_work"], mn["job_restarts"], mn["spot_interruptions"]) == (4, 1, 1)
    assert sorted(loss.how for loss in result.ledger.losses) == ["job restart"] * 3 + ["killed"]


def test_karpenter_alone_stops_the_job_at_its_sigterm_to_one_rank() -> None:
    # Given Karpenter's interruption queue (2 s), When it SIGTERMs rank 1 at 50:02 (rank 1 cannot write)
    result = arm(ddp(), Arm.KARPENTER)
    # Then the job stops then: 20 min 2 s x 32 GPUs
    assert result.figures["training_gpu_minutes_lost"] == pytest.approx((20 * 60 + 2) * DDP_GPUS / 60, abs=1)


def test_a_sigterm_to_rank_zero_of_a_ddp_job_that_saves_on_sigterm_loses_nothing() -> None:
    # Given a DDP job whose rank 0 writes a checkpoint on SIGTERM within its grace
    result = arm(ddp(saves_on_sigterm=True, grace_seconds=120), Arm.KARPENTER, rank=0)
    # Then Karpenter's SIGTERM to rank 0 saves the job
    assert result.figures["training_gpu_minutes_lost"] == pytest.approx(0, abs=1)
    assert result.figures["saved_on_sigterm"] == 1


def test_gpuwarden_asking_rank_zero_checkpoints_the_whole_job_before_the_eviction() -> None:
    # Given a Spot warning for rank 0's node: rank 0 is asked, writes the job's checkpoint, acknowledges
    result = arm(ddp(), Arm.GPUWARDEN, rank=0)
    # Then the job loses at most the seconds between the write and the eviction, on 32 GPUs
    assert result.failures == []
    assert result.figures["training_gpu_minutes_lost"] < 0.2 * DDP_GPUS
    assert figures(result)["checkpoints_timed_out"] == 0


def test_gpuwarden_asks_every_rank_so_rank_zero_writes_before_rank_one_leaves() -> None:
    # Given a Spot warning for rank 1's node (rank 1 cannot write a DDP checkpoint alone)
    result = arm(ddp(), Arm.GPUWARDEN, rank=1)
    # Then all four ranks are asked, rank 0 writes, every rank acknowledges, and the job loses
    # at most the seconds between the write and rank 1's eviction
    mn = figures(result)
    assert (mn["checkpoints_requested"], mn["checkpoints_timed_out"]) == (4, 0)
    assert result.figures["checkpoints_acked"] == 4
    assert result.figures["training_gpu_minutes_lost"] < 0.2 * DDP_GPUS


def test_a_sharded_job_checkpoints_when_every_rank_is_asked() -> None:
    # Given a sharded checkpoint (every rank writes its part together) and rank 2's node interrupted
    result = arm(ddp(checkpoint_writers="all"), Arm.GPUWARDEN, rank=2)
    # Then the job checkpoints (all four were asked) and loses next to nothing
    assert figures(result)["checkpoints_requested"] == 4
    assert result.figures["training_gpu_minutes_lost"] < 0.2 * DDP_GPUS


def test_simulate_json_reports_multi_node_jobs_and_a_headline_over_seeds_deterministically(tmp_path: Any) -> None:
    # Given the four-rank scenario as a file, with a Spot pool busy enough to be interrupted in 2 hours
    import json

    from click.testing import CliRunner

    from gpuwarden.cli import main

    doc = ddp().model_dump(mode="json") | {"days": 0.08}
    doc["instance_types"][0]["spot_band"] = ">20%"
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps(doc))
    # When `simulate --json --seeds 2` runs it twice
    runs = [CliRunner().invoke(main, ["simulate", "--scenario", str(path), "--seeds", "2", "--json"]) for _ in range(2)]
    # Then the document has the multi-node figures per arm and a headline over seeds 7 and 8 with the
    # interruptions it rests on, and the same seeds give the same document (but the real seconds)
    for run in runs:
        assert run.exit_code == 0, run.output
    first, second = (json.loads(r.output) for r in runs)
    assert set(first["multi_node_jobs"]) == {"nothing", "karpenter", "gpuwarden", "no-incidents"}
    assert {"ettr", "restart_overhead_gpu_minutes", "ettr_per_job"} <= set(first["multi_node_jobs"]["karpenter"])
    assert "ettr" in first["arms"]["gpuwarden"]
    assert "ettr" in first["headline"]["arms"]["gpuwarden"]
    assert first["headline"]["weeks"]["runs"] == 2
    assert first["multi_node_jobs"]["nothing"]["jobs"] == 1
    assert first["headline"]["seeds"] == [7, 8]
    assert "multi_node_spot_interruptions" in first["headline"]["arms"]["gpuwarden"]
    for doc_ in (first, second):
        doc_.pop("timing")  # the only wall-clock figures, kept apart
    assert first == second
