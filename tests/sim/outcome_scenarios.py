"""The outcome runs' scenarios whose loss the tests compute by hand (docs/simulate.md): a one-node
fine-tuning job (`tiny`: one Spot node, 4 GPUs, a checkpoint every 30 min, 60 s to write, from t = 0),
the same on an on-demand pool whose node Karpenter expires at 50:00 (`expiring`), and a four-rank DDP
job on four Spot p4d nodes (`ddp`, 4 x 8 GPUs). The Spot warning comes at 50:00; the instance is gone
at 52:00."""

from __future__ import annotations

from typing import Any

from sim.outcome.events import Incident, IncidentKind
from sim.outcome.runner import Arm, ArmResult, run_arm
from sim.outcome.scenario import Scenario

NOTICE = 50 * 60.0
GPUS = 4
#: the four-rank job's GPUs: 4 nodes x 8
DDP_GPUS = 4 * 8


def tiny(**training: Any) -> Scenario:
    job = {
        "name": "ft",
        "pool": "spot",
        "jobs": 1,
        "gpus": GPUS,
        "checkpoint_interval_minutes": 30,
        "checkpoint_seconds": 60,
        "grace_seconds": 30,
        "checkpoint": "annotate",
        "checkpoint_timeout_seconds": 90,
    }
    return Scenario.model_validate(
        {
            "name": "tiny",
            "days": 0.1,
            "instance_types": [{"name": "g6e.12xlarge", "gpus": GPUS, "spot_band": ">20%", "launch_seconds": 300}],
            "pools": [{"name": "spot", "instance_type": "g6e.12xlarge", "capacity_type": "spot", "nodes": 1}],
            "training": [job | training],
            "reactions": {"karpenter_seconds": 2, "gpuwarden_seconds": 1},
        }
    )


SPOT = [Incident(NOTICE, IncidentKind.SPOT_INTERRUPTION, "spot", 0, 120.0, "spot-1", "c1")]
EXPIRES_AT = 50 * 60.0
AGES = {"spot": [2 * 3600.0 - EXPIRES_AT]}


def expiring(**pool: Any) -> Scenario:
    doc = tiny().model_dump(mode="json")
    doc["pools"][0] |= {"capacity_type": "on-demand", "expire_after_hours": 2, "budgets": [{"nodes": "0"}], **pool}
    return Scenario.model_validate(doc)


def ddp(**training: Any) -> Scenario:
    job = {
        "name": "ddp",
        "pool": "spot",
        "jobs": 1,
        "gpus": 8,
        "nodes_per_job": 4,
        "checkpoint_interval_minutes": 30,
        "checkpoint_seconds": 60,
        "grace_seconds": 30,
        "checkpoint": "annotate",
        "checkpoint_timeout_seconds": 90,
    }
    return Scenario.model_validate(
        {
            "name": "ddp",
            "days": 0.1,
            "instance_types": [{"name": "p4d.24xlarge", "gpus": 8, "spot_band": ">20%", "launch_seconds": 300}],
            "pools": [{"name": "spot", "instance_type": "p4d.24xlarge", "capacity_type": "spot", "nodes": 4}],
            "training": [job | training],
            "reactions": {"karpenter_seconds": 2, "gpuwarden_seconds": 1},
        }
    )


def spot(rank: int) -> list[Incident]:
    return [Incident(NOTICE, IncidentKind.SPOT_INTERRUPTION, "spot", rank, 120.0, "spot-1", "c1")]


def arm(scenario: Scenario, which: Arm, rank: int = 1) -> ArmResult:
    return run_arm(scenario, which, spot(rank), days=0.1)
