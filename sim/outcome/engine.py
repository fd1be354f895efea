"""Discrete-event time on the simulator's clock.

The clock is frozen (`SimClock(speed=0)`): it moves only here, to the next thing due, and only
when every actor is asleep. An actor is a thread running gpuwarden's real code (one per
invocation, as concurrent Lambdas would be); its `deps.sleep` is `Engine.sleep`, so a drain that
backs off for 0.5 s costs no real time, and two invocations that overlap in simulated time
overlap here too. Callbacks (the workloads, EC2, the Karpenter stand-in) run in the engine's
thread while no actor runs. Pods past their deletion grace are reaped here, at their exact time.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sim.apiserver.core import KubeSim
from sim.clock import SimClock

Callback = Callable[[], None]


class OutcomeSim(KubeSim):
    """A KubeSim whose pods are reaped by the engine (at their exact time), not by a polling thread.
    Its answers are never gzipped: no figure of a week depends on how the bytes travel, and
    compressing the lists gpuwarden reads at each step doubled the week's time (docs/simulate.md)."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__(clock=clock)
        self._state.compress = False

    def _reap_loop(self) -> None:
        return


class ActorFailed(RuntimeError):
    pass


class Engine:
    def __init__(self, start: datetime) -> None:
        self.sim = OutcomeSim(clock=SimClock(0.0, start=start))
        self.start = start
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._running = 0
        self._errors: list[tuple[str, BaseException]] = []
        self.steps = 0

    # ------------------------------------------------------------ time

    def now(self) -> float:
        """Seconds since the scenario's start."""
        return (self.sim.clock.now() - self.start).total_seconds()

    def when(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def at(self, seconds: float, callback: Callback) -> None:
        """Run `callback` in the engine's thread when the clock reaches `seconds` (thread-safe)."""
        with self._cv:
            heapq.heappush(self._heap, (seconds, next(self._seq), callback))
            self._cv.notify_all()

    def after(self, delay: float, callback: Callback) -> None:
        self.at(self.now() + max(0.0, delay), callback)

    # ------------------------------------------------------------ actors

    def spawn(self, name: str, body: Callback) -> None:
        """Start an actor now; the clock waits for it (and for every sleep it takes)."""
        with self._cv:
            self._running += 1
        threading.Thread(target=self._actor, args=(name, body), name=f"actor-{name}", daemon=True).start()

    def _actor(self, name: str, body: Callback) -> None:
        try:
            body()
        except BaseException as err:
            with self._cv:
                self._errors.append((name, err))
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()

    def side_by_side(self, fn: Callable[[Any], Any], items: Sequence[Any], max_workers: int) -> list[Any]:
        """gpuwarden's runs side by side (`Deps.side_by_side`: a Capacity Block's nodes), each an actor:
        the caller's count passes to them and the last to finish hands it back, so the clock waits for
        every run, not only the first to sleep. (A pool's workers were not counted: the first run's sleep
        let the clock move while the others were still at work, and where a run's steps fell in simulated
        time followed the machine's load, docs/simulate.md#one-seed-one-answer.) Every item gets its own
        thread (`max_workers` apart): a run that waits for a free worker would hold the clock."""
        items = list(items)
        if not items:
            return []
        answers: list[Any] = [None] * len(items)
        failed: list[tuple[int, BaseException]] = []
        left = [len(items)]
        finished = threading.Event()

        def one(i: int) -> None:
            try:
                answers[i] = fn(items[i])
            except BaseException as err:
                failed.append((i, err))
            finally:
                with self._cv:
                    left[0] -= 1
                    if left[0] > 0:
                        self._running -= 1
                        self._cv.notify_all()
                    else:
                        finished.set()  # the last keeps its count: the caller runs on with it

        with self._cv:
            self._running += len(items) - 1
        for i in range(len(items)):
            threading.Thread(target=one, args=(i,), name=f"{threading.current_thread().name}-{i}", daemon=True).start()
        finished.wait()
        if failed:
            raise min(failed, key=lambda f: f[0])[1]
        return answers

    def sleep(self, seconds: float) -> None:
        """An actor's sleep: it yields until the clock has moved `seconds` on."""
        wake = threading.Event()
        with self._cv:
            heapq.heappush(self._heap, (self.now() + max(seconds, 0.001), next(self._seq), wake))
            self._running -= 1
            self._cv.notify_all()
        wake.wait()

    # ------------------------------------------------------------ the loop

    def _next(self, end: float) -> tuple[float, Any] | None:
        with self._cv:
            while self._running > 0:
                self._cv.wait()
            if self._errors:
                name, err = self._errors[0]
                raise ActorFailed(f"{name}: {err!r}") from err
            due = self._heap[0][0] if self._heap else None
            deadline = self.sim.store.next_deadline()
            reap_at = (deadline - self.start).total_seconds() if deadline is not None else None
            candidates = [t for t in (due, reap_at) if t is not None]
            if not candidates or min(candidates) > end:
                return None
            t = max(min(candidates), self.now())
            if due is not None and due <= t:
                _, _, item = heapq.heappop(self._heap)
                return t, item
            return t, None

    def run_until(self, end: float) -> None:
        """Process everything due up to `end` (seconds), then set the clock to `end`."""
        while True:
            step = self._next(end)
            if step is None:
                break
            t, item = step
            self._advance_to(t)
            self.sim.store.reap()
            self.steps += 1
            if isinstance(item, threading.Event):
                with self._cv:
                    self._running += 1
                item.set()
            elif item is not None:
                item()
        self._advance_to(end)
        self.sim.store.reap()

    def _advance_to(self, t: float) -> None:
        delta = t - self.now()
        if delta > 0:
            self.sim.clock.advance(delta)

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)
