"""Simulated workloads: the other side of the checkpoint handshake.

A real training job traps SIGUSR1 (or watches its own pod for `checkpoint-requested`),
writes its checkpoint, then annotates its pod with `gpuwarden.io/checkpoint-done`. These
behaviours do the same against the simulator, after a delay measured on the sim clock,
so tests and the demo exercise gpuwarden's real waiting logic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.apiserver.core import KubeSim
from sim.apiserver.exec_ws import ExecRecord, ExecResult
from sim.apiserver.store import Obj
from sim.clock import Later, rfc3339

CHECKPOINT = "gpuwarden.io/checkpoint"
REQUESTED = "gpuwarden.io/checkpoint-requested"
DONE = "gpuwarden.io/checkpoint-done"


@dataclass
class Workloads:
    """Acks checkpoints: `signal:` after the signal arrives, `annotate` after the request
    annotation appears, `exec:` by the command's exit code. `delay` is in sim seconds;
    `silent` lists pods ("ns/name") that never answer; `exit_codes` sets exec results."""

    sim: KubeSim
    delay: float = 2.0
    delays: dict[str, float] = field(default_factory=dict)
    silent: set[str] = field(default_factory=set)
    exit_codes: dict[str, int] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)
    _pending: set[str] = field(default_factory=set)
    _timers: set[Later] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self) -> Workloads:
        self.sim.exec_handler = self._on_exec
        self.sim.on_change(self._on_change)
        self.sim.on_stop(self.cancel)
        return self

    def cancel(self) -> None:
        """Drop every acknowledgement still waiting (the cluster stopped)."""
        with self._lock:
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()

    def _later(self, key: str, action: Callable[[], None]) -> None:
        """``action`` after the pod's delay in sim seconds (`SimClock.call_later`: inside the sleep
        that passes it on a `sim.stepped.SteppedClock`)."""

        def run() -> None:
            with self._lock:
                self._timers.discard(timer)
            action()

        with self._lock:
            timer = self.sim.clock.call_later(self.delays.get(key, self.delay), run)
            self._timers.add(timer)

    def _ack(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        try:
            self.sim.patch_direct(
                "Pod", name, {"metadata": {"annotations": {DONE: rfc3339(self.sim.clock.now())}}}, namespace
            )
        except Exception:
            return
        with self._lock:
            self.acked.append(key)

    def _on_exec(self, record: ExecRecord) -> ExecResult:
        key = f"{record.namespace}/{record.pod}"
        if record.command[:2] == ["kill", "-s"]:
            if key not in self.silent:
                self._later(key, lambda: self._ack(record.namespace, record.pod))
            return ExecResult(0)
        return ExecResult(self.exit_codes.get(key, 0), stdout="checkpoint written\n")

    def _on_change(self, kind: str, event_type: str, obj: Obj) -> None:
        if kind != "Pod" or event_type != "MODIFIED":
            return
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get(CHECKPOINT) != "annotate" or REQUESTED not in annotations or DONE in annotations:
            return
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._lock:
            if key in self.silent or key in self._pending:
                return
            self._pending.add(key)
        self._later(key, lambda: self._ack(str(meta.get("namespace")), str(meta.get("name"))))
