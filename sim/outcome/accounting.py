"""What each arm lost and paid: the ledger of the run, and the checks that it adds up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.outcome.goodput import Goodput
from sim.outcome.goodput import figures as goodput_figures


@dataclass
class Loss:
    at: float
    pod: str
    node: str
    gpus: int
    #: seconds of training after the last completed checkpoint, when the pod stopped
    seconds: float
    how: str  # "killed", "after SIGTERM", "job restart"
    #: what the cause of the loss is read from (`sim/outcome/causes.py`): the pod whose stop stopped
    #: the work (itself, or the rank of its job that stopped) and its node, when the work stopped, a checkpoint
    #: write in flight then (began, would have ended, why), when a checkpoint was last asked of it
    #: and when one it was asked for (or wrote on SIGTERM) last completed
    trigger: str = ""
    trigger_node: str = ""
    stopped_at: float | None = None
    #: when that pod got SIGTERM (or, without one, when it was gone)
    ended_at: float | None = None
    writing: tuple[float, float, str] | None = None
    asked_at: float | None = None
    saved_at: float | None = None

    @property
    def gpu_minutes(self) -> float:
        return self.gpus * self.seconds / 60.0


@dataclass
class NodeBook:
    gpus: int
    up_at: float
    idle_since: float | None = None
    idle_gpu_seconds: float = 0.0
    down_at: float | None = None
    #: a workload pod ran here at some point
    used: bool = False
    replacement: bool = False
    #: its NodePool (the scenario's pool: instance type and capacity type, so its price)
    pool: str = ""


@dataclass
class Ledger:
    """Counted by the world and the reactors while an arm runs."""

    losses: list[Loss] = field(default_factory=list)
    nodes: dict[str, NodeBook] = field(default_factory=dict)
    incidents: dict[str, str] = field(default_factory=dict)  # incident id -> what became of it
    counters: dict[str, int] = field(default_factory=dict)
    trace: list[tuple[float, str, str]] = field(default_factory=list)  # (t, node, what)
    #: pod key -> the multi-node job it is a rank of (sim/outcome/gangs.py)
    gang_of: dict[str, str] = field(default_factory=dict)
    #: when the run ended (`close`): nodes still up are paid until then
    ended_at: float = 0.0
    #: node -> when EC2 takes its instance (a loss warning's deadline), whoever drained it before
    instance_ends: dict[str, float] = field(default_factory=dict)
    #: every training job's training time (docs/simulate.md#goodput)
    goodput: Goodput = field(default_factory=Goodput)

    def job_of(self, pod: str) -> str:
        """The training job a pod is (a single pod: its name less the restart count) or a rank of."""
        return self.gang_of.get(pod) or pod.split("/", 1)[-1].rsplit("-", 1)[0]

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def note(self, t: float, node: str, what: str) -> None:
        self.trace.append((t, node, what))

    # ------------------------------------------------------------ nodes

    def node_up(self, name: str, gpus: int, t: float, replacement: bool, pool: str = "") -> None:
        self.nodes[name] = NodeBook(gpus=gpus, up_at=t, replacement=replacement, pool=pool)

    def set_idle(self, name: str, idle: bool, t: float) -> bool:
        """Returns True when the node became idle now."""
        book = self.nodes.get(name)
        if book is None or book.down_at is not None:
            return False
        if idle and book.idle_since is None:
            book.idle_since = t
            return True
        if not idle and book.idle_since is not None:
            book.idle_gpu_seconds += book.gpus * (t - book.idle_since)
            book.idle_since = None
        return False

    def node_down(self, name: str, t: float) -> None:
        book = self.nodes.get(name)
        if book is None or book.down_at is not None:
            return
        self.set_idle(name, False, t)
        book.down_at = t

    def close(self, t: float) -> None:
        self.ended_at = t
        self.goodput.close(t)
        for book in self.nodes.values():
            if book.down_at is None and book.idle_since is not None:
                book.idle_gpu_seconds += book.gpus * (t - book.idle_since)
                book.idle_since = t

    # ------------------------------------------------------------ figures

    def figures(self) -> dict[str, Any]:
        c = self.counters
        return {
            "training_gpu_minutes_lost": round(sum(loss.gpu_minutes for loss in self.losses), 1),
            "pods_lost_work": sum(1 for loss in self.losses if loss.seconds > 0),
            "checkpoints_requested": c.get("checkpoints_requested", 0),
            "checkpoints_acked": c.get("checkpoints_acked", 0),
            "checkpoints_timed_out": c.get("checkpoints_timed_out", 0),
            "saved_on_sigterm": c.get("saved_on_sigterm", 0),
            "idle_gpu_hours": round(sum(b.idle_gpu_seconds for b in self.nodes.values()) / 3600.0, 1),
            "evictions_blocked_by_pdb": c.get("evictions_blocked", 0),
            "nodes_past_deadline": c.get("nodes_past_deadline", 0),
            "replacements_launched": sum(1 for b in self.nodes.values() if b.replacement),
            "replacements_unused": sum(1 for b in self.nodes.values() if b.replacement and not b.used),
            "interruptions": c.get("interruptions", 0),
            "nodes_expired_by_karpenter": c.get("expired_by_karpenter", 0),
            "incidents_missed": c.get("incidents_missed", 0),
            "gpuwarden_invocations": c.get("gpuwarden_invocations", 0),
            **goodput_figures(self),
        }
