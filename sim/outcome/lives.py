"""What the outcome world keeps of each workload pod (its life, from start to end) and of each pod
waiting for a place, and the taints that keep a pool's pods in their own pool."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sim import builders as b
from sim.outcome.scenario import Inference, Notebooks, Training

REQUESTED = "gpuwarden.io/checkpoint-requested"
DONE = "gpuwarden.io/checkpoint-done"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NAMESPACES = {"training": "ml", "inference": "serving", "notebook": "research"}
POOL_LABEL = "karpenter.sh/nodepool"
POOL_TAINT = "sim.outcome/pool"
Obj = dict[str, Any]
Workload = Training | Inference | Notebooks


@dataclass
class PodLife:
    """One pod of a workload, from its start to its end."""

    key: str  # namespace/name
    kind: str  # training | inference | notebook
    spec: Workload
    slot: int  # job / replica / notebook index
    gpus: int
    node: str = ""
    started: float = 0.0
    #: training stopped for good (SIGTERM)
    stopped_at: float | None = None
    #: progress is safe up to this time: a requested or SIGTERM checkpoint completed then
    #: (training pauses while it writes one, and resumes after a requested one)
    captured: float | None = None
    #: (paused at, completes at) of a requested or SIGTERM checkpoint being written
    saving: tuple[float, float] | None = None
    saving_why: str = ""
    sigterm_at: float | None = None
    dead: bool = False
    #: when a checkpoint was last asked of it, and when a requested or SIGTERM checkpoint completed
    asked_at: float | None = None
    saved_at: float | None = None

    def periodic_capture(self, stop: float, now: float) -> float:
        """The latest periodic capture taken before `stop` whose write completed by `now`."""
        assert isinstance(self.spec, Training)
        interval = self.spec.checkpoint_interval_minutes * 60
        k = math.floor((min(stop, now - self.spec.checkpoint_seconds) - self.started) / interval)
        return self.started + k * interval if k >= 1 else self.started


@dataclass
class Pending:
    kind: str
    spec: Workload
    slot: int
    since: float
    pod: str


def pool_taints(pool: str) -> list[Obj]:
    """A GPU pool's taints: the GPU one, and one naming the pool (so a pod lands only in its own pool)."""
    return [dict(b.GPU_TAINT), {"key": POOL_TAINT, "value": pool, "effect": "NoSchedule"}]


def pool_tolerations(pool: str) -> list[Obj]:
    return [dict(b.GPU_TOLERATION), {"key": POOL_TAINT, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]
