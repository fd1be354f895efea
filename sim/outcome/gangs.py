"""Multi-node training jobs in the outcome runs: the seed's Indexed Job (`torchrun --nnodes=4
--node_rank=$(JOB_COMPLETION_INDEX)`) and JobSets, one rank per GPU node.

A job trains only while every rank runs; it checkpoints as one (periodically from the moment
its ranks formed; on request when its writers are asked: rank 0 with DDP, every rank with a
sharded checkpoint; on SIGTERM only where rank 0 alone can write it, DDP). When one rank stops,
the job stops: every rank restarts from the job's last completed checkpoint, so each rank loses
its GPUs x the time since then (the ranks on healthy nodes wait, GPUs idle, for the Job
controller's new pod and the rendezvous). Ranks are labelled as their controllers label them
(`sim/training_jobs.py`), so gpuwarden finds the job as it would on a real cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sim.clock import rfc3339
from sim.outcome.accounting import Loss
from sim.outcome.lives import DONE, PodLife, Workload
from sim.outcome.scenario import Training
from sim.outcome.world import World
from sim.training_jobs import COMPLETION_INDEX, indexed_job

Obj = dict[str, Any]
#: a rank's slot: (job + 1) * RANK_BASE + rank (a slot below RANK_BASE is a whole job, from `build`)
RANK_BASE = 1000


@dataclass
class Gang:
    name: str
    spec: Training
    ranks: dict[int, PodLife] = field(default_factory=dict)
    #: every rank runs since then (None: the job waits for a rank)
    formed_at: float | None = None
    #: a rank stopped then: no progress since
    stopped_at: float | None = None
    #: progress is safe up to here (a requested or SIGTERM checkpoint completed)
    captured: float | None = None
    saving: tuple[float, float, str] | None = None  # (paused at, completes at, why)
    asked: set[int] = field(default_factory=set)
    #: the rank whose SIGTERM stopped the job; when the job was last asked; when a checkpoint it
    #: was asked for (or wrote on SIGTERM) last completed
    stopped_by: str = ""
    asked_at: float | None = None
    saved_at: float | None = None

    def periodic_capture(self, stop: float, now: float) -> float:
        assert self.formed_at is not None
        interval = self.spec.checkpoint_interval_minutes * 60
        k = math.floor((min(stop, now - self.spec.checkpoint_seconds) - self.formed_at) / interval)
        return self.formed_at + k * interval if k >= 1 else self.formed_at

    def writers_asked(self) -> bool:
        if self.spec.checkpoint_writers == "rank0":
            return 0 in self.asked
        return len(self.asked) == self.spec.nodes_per_job


def is_gang(spec: Workload) -> bool:
    return isinstance(spec, Training) and spec.nodes_per_job > 1


def job_and_rank(slot: int) -> tuple[int, int]:
    return slot // RANK_BASE - 1, slot % RANK_BASE


@dataclass
class GangWorld(World):
    gangs: dict[str, Gang] = field(default_factory=dict)

    # ------------------------------------------------------------ the controllers

    def gang_name(self, spec: Training, job: int) -> str:
        return f"{spec.name}-{job:02d}"

    def _want(self, kind: str, spec: Workload, slot: int) -> None:
        if not is_gang(spec) or slot >= RANK_BASE:
            super()._want(kind, spec, slot)
            return
        assert isinstance(spec, Training)
        name = self.gang_name(spec, slot)
        self.gangs[name] = Gang(name, spec)
        for child in range(math.ceil(spec.nodes_per_job / self._per_child(spec))):
            job = indexed_job(self._child(spec, slot, child), self._per_child(spec), "ml")
            if self.sim.get("Job", job["metadata"]["name"], "ml") is None:
                self.sim.create(job)
        for rank in range(spec.nodes_per_job):
            super()._want(kind, spec, (slot + 1) * RANK_BASE + rank)

    @staticmethod
    def _per_child(spec: Training) -> int:
        return spec.pods_per_child_job if spec.controller == "jobset" else spec.nodes_per_job

    def _child(self, spec: Training, job: int, child: int) -> str:
        name = self.gang_name(spec, job)
        return f"{name}-workers-{child}" if spec.controller == "jobset" else name

    def _pod(self, kind: str, spec: Workload, name: str) -> Obj:
        pod = super()._pod(kind, spec, name)
        if not is_gang(spec):
            return pod
        assert isinstance(spec, Training)
        job, rank = job_and_rank(int(name[len(spec.name) + 1 :].split("-")[0]))
        per_child = self._per_child(spec)
        child, index = divmod(rank, per_child)
        child_job = self.sim.get("Job", self._child(spec, job, child), "ml")
        assert child_job is not None
        meta = pod["metadata"]
        labels = {
            "job-name": child_job["metadata"]["name"],
            "batch.kubernetes.io/job-name": child_job["metadata"]["name"],
            "controller-uid": child_job["metadata"]["uid"],
            "batch.kubernetes.io/controller-uid": child_job["metadata"]["uid"],
            COMPLETION_INDEX: str(index),
        }
        if spec.controller == "jobset":
            labels |= {
                "jobset.sigs.k8s.io/jobset-name": self.gang_name(spec, job),
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(math.ceil(spec.nodes_per_job / per_child)),
                "jobset.sigs.k8s.io/job-index": str(child),
                "jobset.sigs.k8s.io/job-global-index": str(child),
            }
        meta["labels"] = {k: v for k, v in meta["labels"].items() if k != "job-name"} | labels
        meta["annotations"][COMPLETION_INDEX] = str(index)
        uid = child_job["metadata"]["uid"]
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": labels["job-name"], "uid": uid, "controller": True}
        ]
        self.ledger.gang_of[f"ml/{meta['name']}"] = self.gang_name(spec, job)
        return pod

    def _gang(self, life: PodLife) -> tuple[Gang, int] | None:
        if not is_gang(life.spec):
            return None
        assert isinstance(life.spec, Training)
        job, rank = job_and_rank(life.slot)
        return self.gangs[self.gang_name(life.spec, job)], rank

    def _start(self, want: Any, node: Obj) -> None:
        super()._start(want, node)
        key = f"ml/{want.pod}"
        life = self.lives.get(key)
        found = self._gang(life) if life is not None else None
        if found is None or life is None:
            return
        gang, rank = found
        gang.ranks[rank] = life
        if len(gang.ranks) == gang.spec.nodes_per_job and gang.formed_at is None:
            now = self.engine.now()
            # it trains (and checkpoints) after its restart overhead (docs/simulate.md#goodput)
            clock = self._clock(life)
            clock.begin(now, self.scenario.restart_overhead(gang.spec))
            gang.formed_at, gang.stopped_at, gang.captured, gang.saving = clock.trains_from, None, None, None
            gang.asked_at = gang.saved_at = None
            gang.asked.clear()
            self.ledger.note(now, life.node, f"job {gang.name}: every rank runs, training")
            for other in gang.ranks.values():
                self._update_idle(other.node)

    # ------------------------------------------------------------ what the ranks do

    def _checkpoint_requested(self, life: PodLife, why: str) -> None:
        found = self._gang(life)
        if found is None:
            super()._checkpoint_requested(life, why)
            return
        gang, rank = found
        with self._lock:
            if gang.formed_at is None or gang.stopped_at is not None or life.dead:
                return  # a job that is not training writes nothing: the request times out
            if not gang.asked:
                gang.asked_at = self.engine.now()
            gang.asked.add(rank)
            if gang.saving is not None or not gang.writers_asked():
                return
            now = self.engine.now()
            gang.saving = (now, now + gang.spec.checkpoint_seconds, "requested")
            self._clock(life).pause(now)
        self.ledger.note(now, life.node, f"job {gang.name}: checkpoint requested of every rank, training paused")
        self.engine.at(gang.saving[1], lambda: self._gang_saved(gang))

    def _gang_saved(self, gang: Gang) -> None:
        with self._lock:
            if gang.saving is None:
                return  # the job broke before the write completed
            _, done, why = gang.saving
            gang.captured, gang.saved_at, gang.saving = done, done, None
            asked, gang.asked = set(gang.asked), set()
        now = self.engine.now()
        self.ledger.note(now, "", f"job {gang.name}: checkpoint written ({why})")
        for stopping in [r for r in gang.ranks.values() if r.sigterm_at is not None and not r.dead]:
            self._exits(stopping, "its part of the checkpoint is written")
        if why == "on SIGTERM":
            self.ledger.count("saved_on_sigterm")
            return
        self.ledger.goodput.clock(gang.name, gang.spec.gpus * gang.spec.nodes_per_job).resume(now)
        for rank in sorted(asked):
            life = gang.ranks.get(rank)
            if life is None or life.dead:
                continue
            namespace, name = life.key.split("/", 1)
            if self.sim.get("Pod", name, namespace) is not None:
                self.ledger.count("checkpoints_acked")
                patch = {"metadata": {"annotations": {DONE: rfc3339(self.sim.clock.now())}}}
                self.sim.patch_direct("Pod", name, patch, namespace)

    def _sigterm(self, life: PodLife) -> None:
        found = self._gang(life)
        if found is None or life.stopped_at is not None:
            super()._sigterm(life)
            return
        gang, rank = found
        now = self.engine.now()
        life.sigterm_at = life.stopped_at = now
        self.ledger.note(now, life.node, f"{life.key}: SIGTERM (rank {rank} of {gang.name})")
        sole_writer = gang.spec.checkpoint_writers == "rank0" and rank == 0
        if gang.formed_at is not None and gang.stopped_at is None:
            gang.stopped_at, gang.stopped_by = now, life.key
            self._clock(life).end(now)
            if sole_writer and gang.spec.saves_on_sigterm and gang.saving is None:
                gang.saving = (now, now + gang.spec.checkpoint_seconds, "on SIGTERM")
                self.engine.at(gang.saving[1], lambda: self._gang_saved(gang))
        # a rank that writes (its part of) the checkpoint in flight and traps SIGTERM finishes it
        # (`_gang_saved` lets it exit); any other rank exits now, and the job restarts with it
        writes = sole_writer or gang.spec.checkpoint_writers == "all"
        if not (gang.spec.saves_on_sigterm and writes and gang.saving is not None):
            self._exits(life, "it does not trap SIGTERM" if not gang.spec.saves_on_sigterm else "it writes nothing")
        for other in gang.ranks.values():
            self._update_idle(other.node)

    def _record_loss(self, life: PodLife, now: float, paused: float | None) -> None:
        found = self._gang(life)
        if found is None:
            super()._record_loss(life, now, paused)
            return
        gang, rank = found
        with self._lock:
            ranks = dict(gang.ranks)
            gang.ranks.pop(rank, None)
            if gang.formed_at is None:
                return  # the job was already waiting: nothing more to lose
            stop = min(t for t in (gang.stopped_at, now) if t is not None)
            writing = gang.saving if gang.saving is not None and gang.saving[1] > now else None
            if writing is not None:
                stop = min(stop, writing[0])  # no progress since the unfinished write began
            capture = max(gang.captured or gang.formed_at, gang.periodic_capture(stop, now))
            trigger = gang.stopped_by or life.key
            ended = gang.stopped_at if gang.stopped_by else (life.sigterm_at if life.sigterm_at is not None else now)
            trigger_node = next((r.node for r in ranks.values() if r.key == trigger), life.node)
            gang.formed_at, gang.saving, gang.stopped_by = None, None, ""
            gang.asked.clear()
        for _, other in sorted(ranks.items()):
            how = ("after SIGTERM" if life.sigterm_at is not None else "killed") if other is life else "job restart"
            seconds = max(0.0, stop - capture)
            loss = Loss(now, other.key, other.node, other.gpus, seconds, how, trigger, trigger_node, stop)
            loss.writing, loss.asked_at, loss.saved_at, loss.ended_at = writing, gang.asked_at, gang.saved_at, ended
            self.ledger.losses.append(loss)
        self.ledger.note(now, life.node, f"job {gang.name}: rank {rank} gone, every rank restarts")
        for other in ranks.values():
            if other is not life:
                self._update_idle(other.node)

    def pod_busy(self, life: PodLife, t: float) -> bool:
        found = self._gang(life)
        if found is None:
            return super().pod_busy(life, t)
        gang, _ = found
        return life.sigterm_at is None and gang.formed_at is not None and gang.stopped_at is None

    # ------------------------------------------------------------ what the incidents hit

    def count_hits(self, kind: str, nodes: list[str]) -> None:
        """Count an incident once per multi-node job it touches (`multinode:<kind>`)."""
        jobs = {self.ledger.gang_of[k] for n in nodes for k in self.node_pods.get(n, set()) if k in self.ledger.gang_of}
        if jobs:
            self.ledger.count(f"multinode:{kind}", len(jobs))
