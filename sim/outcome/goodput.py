"""Goodput: how much of the GPU time a training job held went into training it kept
(docs/simulate.md#goodput).

ETTR (effective training time ratio, Meta's "Revisiting Reliability in Large-Scale Machine
Learning Research Clusters", arXiv:2410.21680): productive training time over the wall time the
job was allocated. Here every training job is allocated the whole run (its pods exist from the
start to the end), and a job's productive time is the time it trained, less:

- the time it did not train at all: waiting for a node or for its other ranks, the restart
  overhead after each restart (pod start, collective initialisation, checkpoint load: the
  scenario's `restart_overhead_seconds`), and pauses while a requested checkpoint is written;
- the work it lost: trained after its last completed checkpoint and redone after a restart (the
  ledger's losses, the same that `training lost (GPU-minutes)` counts).

Per arm the figure is weighted by GPUs: sum(GPUs x productive) / sum(GPUs x wall).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class JobClock:
    """One training job's (a single pod, or a multi-node job's ranks together) training time."""

    gpus: int
    #: the job began (or began again) then; it trains from `trains_from` (after the restart overhead)
    begun_at: float | None = None
    trains_from: float = 0.0
    paused_at: float | None = None
    trained: float = 0.0
    overhead: float = 0.0
    paused: float = 0.0
    starts: int = 0

    def begin(self, t: float, overhead: float) -> None:
        """The job runs again at `t`: its first start costs nothing (it ran before the window), a
        restart costs `overhead` seconds before it trains."""
        if self.begun_at is not None:
            return
        cost = overhead if self.starts > 0 else 0.0
        self.starts += 1
        self.begun_at, self.trains_from, self.paused_at = t, t + cost, None

    def pause(self, t: float) -> None:
        if self.begun_at is not None and self.paused_at is None:
            self.paused_at = max(t, self.trains_from)

    def resume(self, t: float) -> None:
        if self.paused_at is not None:
            self.paused += max(0.0, t - self.paused_at)
            self.paused_at = None

    def end(self, t: float) -> None:
        """The job stopped training at `t` (a rank's SIGTERM, or the pod gone, or the run's end)."""
        if self.begun_at is None:
            return
        self.resume(t)
        self.overhead += max(0.0, min(t, self.trains_from) - self.begun_at)
        self.trained += max(0.0, t - self.trains_from)
        self.begun_at = None


@dataclass
class Goodput:
    """Every training job's clock in one arm (kept in the ledger)."""

    jobs: dict[str, JobClock] = field(default_factory=dict)

    def clock(self, job: str, gpus: int) -> JobClock:
        return self.jobs.setdefault(job, JobClock(gpus))

    def close(self, t: float) -> None:
        for clock in self.jobs.values():
            clock.end(t)


def ettr(clocks: list[JobClock], lost_gpu_seconds: float, wall: float) -> float:
    """GPU-weighted ETTR of these jobs: (GPU-seconds trained - GPU-seconds of work lost) / GPU-seconds
    allocated (every job: the whole run)."""
    allocated = sum(c.gpus for c in clocks) * wall
    if allocated <= 0:
        return 1.0
    trained = sum(c.gpus * (c.trained - c.paused) for c in clocks)
    return max(0.0, (trained - lost_gpu_seconds) / allocated)


def figures(ledger: Any, jobs: set[str] | None = None) -> dict[str, Any]:
    """ETTR and where the rest went (GPU-minutes), for `jobs` (None: every training job)."""
    clocks = {k: c for k, c in ledger.goodput.jobs.items() if jobs is None or k in jobs}
    wall = ledger.ended_at
    lost = sum(loss.gpus * loss.seconds for loss in ledger.losses if jobs is None or ledger.job_of(loss.pod) in jobs)
    values = list(clocks.values())
    allocated = sum(c.gpus for c in values) * wall
    trained = sum(c.gpus * c.trained for c in values)
    return {
        "ettr": round(ettr(values, lost, wall), 4),
        "gpu_minutes_allocated": round(allocated / 60.0, 1),
        "restart_overhead_gpu_minutes": round(sum(c.gpus * c.overhead for c in values) / 60.0, 1),
        "checkpoint_pause_gpu_minutes": round(sum(c.gpus * c.paused for c in values) / 60.0, 1),
        "not_running_gpu_minutes": round(
            max(0.0, allocated - trained - sum(c.gpus * c.overhead for c in values)) / 60.0, 1
        ),
        "job_restarts": sum(max(0, c.starts - 1) for c in values),
    }


def per_job(ledger: Any, jobs: set[str]) -> dict[str, float]:
    """ETTR of each of `jobs`, alone."""
    return {job: figures(ledger, {job})["ettr"] for job in sorted(jobs) if job in ledger.goodput.jobs}
