"""The figures of the multi-node training jobs alone (sim/outcome/gangs.py), per arm: what every
rank lost when the job restarted, and how many incidents that rests on."""

from __future__ import annotations

from typing import Any

from sim.outcome import goodput

# An ArmResult / Outcome of sim.outcome.runner (which imports this module: typed loosely here).
ArmResult = Any
Outcome = Any

ROWS = (
    ("ettr", "goodput (ETTR)"),
    ("restart_overhead_gpu_minutes", "restart overhead (GPU-minutes)"),
    ("training_gpu_minutes_lost", "training lost (GPU-minutes)"),
    ("ranks_lost_work", "ranks that lost work"),
    ("job_restarts", "job restarts"),
    ("job_restarts_losing_work", "  of which lost work"),
    ("checkpoints_requested", "ranks asked to checkpoint"),
    ("checkpoints_timed_out", "rank checkpoints timed out"),
    ("spot_interruptions", "Spot interruptions (on a job's node)"),
    ("incidents", "incidents on a job's node"),
)


def figures(result: ArmResult) -> dict[str, Any]:
    ledger = result.ledger
    ranks = ledger.gang_of
    losses = [loss for loss in ledger.losses if loss.pod in ranks]
    jobs = set(ranks.values())
    actions = [a for r in result.gpuwarden_results for a in r.get("actions") or [] if str(a.get("pod")) in ranks]
    hits = {k.split(":", 1)[1]: n for k, n in ledger.counters.items() if k.startswith("multinode:")}
    return {
        "jobs": len(jobs),
        "training_gpu_minutes_lost": round(sum(loss.gpu_minutes for loss in losses), 1),
        "ranks_lost_work": sum(1 for loss in losses if loss.seconds > 0),
        "job_restarts": len({(ranks[loss.pod], loss.at) for loss in losses}),
        "job_restarts_losing_work": len({(ranks[loss.pod], loss.at) for loss in losses if loss.seconds > 0}),
        "checkpoints_requested": sum(1 for a in actions if a.get("type") == "checkpoint-requested"),
        "checkpoints_timed_out": sum(
            1 for a in actions if a.get("type") == "evict" and a.get("reason") == "checkpoint timed out"
        ),
        "spot_interruptions": hits.get("spot-interruption", 0),
        "incidents": sum(hits.values()),
        **{k: v for k, v in goodput.figures(ledger, jobs).items() if k != "job_restarts"},
        "ettr_per_job": goodput.per_job(ledger, jobs),
    }


def multinode_json(outcome: Outcome) -> dict[str, Any]:
    return {r.arm.value: figures(r) for r in outcome.arms}
