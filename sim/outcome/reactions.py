"""The workloads' side of the outcome world: what a training pod does when gpuwarden asks it to
checkpoint (signal, exec or annotation), when it gets SIGTERM, and when it is gone (the work since its
last completed checkpoint is lost; its controller recreates it). A mixin of `World`, which holds the
state these read.

SIGTERM: a training process that traps it (`saves_on_sigterm`) finishes the checkpoint it is writing,
or writes one, and exits when it is written (or when its grace runs out); one that does not trap it
exits at once, and a checkpoint it was writing dies with it. Its pod is gone when its process exits,
as the kubelet reports the container's exit, not when the grace period ends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

from sim.apiserver.exec_ws import ExecRecord, ExecResult
from sim.clock import rfc3339
from sim.outcome.accounting import Ledger, Loss
from sim.outcome.engine import Engine, OutcomeSim
from sim.outcome.goodput import JobClock
from sim.outcome.lives import DONE, REQUESTED, Obj, PodLife, Workload
from sim.outcome.scenario import Training


class WorkloadSide:
    """What the workloads see and do; `World` supplies the state and the scheduling below."""

    lives: dict[str, PodLife]
    node_pods: dict[str, set[str]]
    on_empty: list[Callable[[str], None]]
    engine: Engine
    ledger: Ledger
    _lock: threading.RLock

    @property
    def sim(self) -> OutcomeSim:
        raise NotImplementedError

    def _want(self, kind: str, spec: Workload, slot: int) -> None:
        raise NotImplementedError

    def _update_idle(self, node: str) -> None:
        raise NotImplementedError

    def _notebook_busy(self, spec: Workload, t: float) -> bool:
        raise NotImplementedError

    def _node_added(self, node: Obj) -> None:
        raise NotImplementedError

    def _node_gone(self, name: str) -> None:
        raise NotImplementedError

    def _on_change(self, kind: str, event: str, obj: Obj) -> None:
        if kind == "Node":
            if event == "ADDED":
                self._node_added(obj)
            elif event == "DELETED":
                self._node_gone(obj["metadata"]["name"])
            return
        if kind != "Pod":
            return
        meta = obj["metadata"]
        life = self.lives.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if life is None or life.dead:
            return
        if event == "DELETED":
            self._died(life)
        elif meta.get("deletionTimestamp") and life.sigterm_at is None:
            self._sigterm(life)
        elif self._asked_by_annotation(life, meta.get("annotations") or {}):
            self._checkpoint_requested(life, "requested")

    @staticmethod
    def _asked_by_annotation(life: PodLife, annotations: dict[str, str]) -> bool:
        mode = life.spec.checkpoint if isinstance(life.spec, Training) else None
        return mode == "annotate" and REQUESTED in annotations and DONE not in annotations

    def _on_exec(self, record: ExecRecord) -> ExecResult:
        life = self.lives.get(f"{record.namespace}/{record.pod}")
        if life is not None and record.command[:2] == ["kill", "-s"]:
            self._checkpoint_requested(life, "requested")
        return ExecResult(0)

    def _clock(self, life: PodLife) -> JobClock:
        """The training clock of the job the pod is, or is a rank of (docs/simulate.md#goodput)."""
        ranks = life.spec.nodes_per_job if isinstance(life.spec, Training) else 1
        return self.ledger.goodput.clock(self.ledger.job_of(life.key), life.gpus * ranks)

    def _checkpoint_requested(self, life: PodLife, why: str) -> None:
        with self._lock:
            if life.saving is not None or life.dead or life.stopped_at is not None:
                return
            assert isinstance(life.spec, Training)
            now = self.engine.now()
            life.saving = (now, now + life.spec.checkpoint_seconds)
            life.saving_why = why
            life.asked_at = now
            self._clock(life).pause(now)
        self.ledger.note(now, life.node, f"{life.key}: checkpoint {why}, training paused")
        self.engine.at(life.saving[1], lambda: self._saved(life))

    def _saved(self, life: PodLife) -> None:
        with self._lock:
            if life.dead or life.saving is None:
                return
            life.captured = life.saved_at = life.saving[1]
            life.saving = None
        now = self.engine.now()
        self.ledger.note(now, life.node, f"{life.key}: checkpoint written ({life.saving_why})")
        if life.saving_why == "on SIGTERM":
            self.ledger.count("saved_on_sigterm")
        else:
            self._clock(life).resume(now)
            namespace, name = life.key.split("/", 1)
            if self.sim.get("Pod", name, namespace) is not None:
                self.ledger.count("checkpoints_acked")
                self.sim.patch_direct(
                    "Pod", name, {"metadata": {"annotations": {DONE: rfc3339(self.sim.clock.now())}}}, namespace
                )
        if life.sigterm_at is not None:
            self._exits(life, "its checkpoint is written")

    def _sigterm(self, life: PodLife) -> None:
        now = self.engine.now()
        life.sigterm_at = now
        self.ledger.note(now, life.node, f"{life.key}: SIGTERM")
        if life.kind != "training" or life.stopped_at is not None:
            self._update_idle(life.node)
            return
        assert isinstance(life.spec, Training)
        life.stopped_at = now
        self._clock(life).end(now)
        if not life.spec.saves_on_sigterm:
            self._exits(life, "it does not trap SIGTERM")
        elif life.saving is None:
            life.saving = (now, now + life.spec.checkpoint_seconds)
            life.saving_why = "on SIGTERM"
            self.engine.at(life.saving[1], lambda: self._saved(life))
        self._update_idle(life.node)

    def _exits(self, life: PodLife, why: str) -> None:
        """The training process exits: its pod is gone now (the kubelet reports the exit), whatever
        grace it had left."""
        self.ledger.note(self.engine.now(), life.node, f"{life.key}: exits ({why})")
        self.engine.after(0, partial(self._remove, life))

    def _remove(self, life: PodLife) -> None:
        namespace, name = life.key.split("/", 1)
        if not life.dead and self.sim.get("Pod", name, namespace) is not None:
            self.sim.delete_direct("Pod", name, namespace, grace_seconds=0)

    def _died(self, life: PodLife) -> None:
        now = self.engine.now()
        with self._lock:
            paused = None
            if life.saving is not None and life.saving[1] <= now:
                life.captured = life.saved_at = life.saving[1]
                if life.saving_why == "on SIGTERM":
                    self.ledger.count("saved_on_sigterm")
            elif life.saving is not None:
                paused = life.saving[0]  # no progress since the unfinished write began
            life.saving = None
            life.dead = True
            self.lives.pop(life.key, None)
            self.node_pods.get(life.node, set()).discard(life.key)
        if life.kind == "training":
            self._record_loss(life, now, paused)
            self._clock(life).end(now)
        self.ledger.note(now, life.node, f"{life.key}: gone")
        if life.kind != "notebook" or self._notebook_busy(life.spec, now):
            self.engine.after(0, partial(self._want, life.kind, life.spec, life.slot))
        self._update_idle(life.node)
        if life.node in self.node_pods and not self.node_pods[life.node]:
            self._became_empty(life.node)

    def _record_loss(self, life: PodLife, now: float, paused: float | None) -> None:
        """The work a training pod loses when it is gone: since its last completed checkpoint."""
        stop = min(t for t in (life.stopped_at, paused, now) if t is not None)
        capture = max(life.captured or life.started, life.periodic_capture(stop, now))
        how = "after SIGTERM" if life.sigterm_at is not None else "killed"
        writing = None if paused is None else (paused, paused + self._write_seconds(life), life.saving_why)
        self.ledger.losses.append(
            Loss(
                now,
                life.key,
                life.node,
                life.gpus,
                max(0.0, stop - capture),
                how,
                trigger=life.key,
                trigger_node=life.node,
                stopped_at=stop,
                ended_at=life.sigterm_at if life.sigterm_at is not None else now,
                writing=writing,
                asked_at=life.asked_at,
                saved_at=life.saved_at,
            )
        )

    @staticmethod
    def _write_seconds(life: PodLife) -> float:
        return life.spec.checkpoint_seconds if isinstance(life.spec, Training) else 0.0

    def _became_empty(self, node: str) -> None:
        for hook in self.on_empty:
            hook(node)
