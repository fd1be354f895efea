"""A simulated clock that moves only when the code under test sleeps (docs/architecture.md,
"The clock that moves on sleep").

`SimClock` runs at a multiple of wall time, so where a drain ends against its deadline follows the
machine's load. `SteppedClock` is frozen between sleeps: real time spent computing, waiting for
HTTP answers or for moto costs no simulated time. ``sleep(s)`` moves it ``s`` seconds forward and,
inside that move and before it returns, runs every timed thing of the simulator that falls due, one
at a time, in time order, each at its own instant: a workload's acknowledgement (`call_later`), the
end of a pod's grace period (`KubeSim` registers its store's reaper with `add_timed`). A scene's
outcome is then a function of its inputs only.

One driver sleeps at a time: sleeps from several threads are serialized, each moving the clock from
where the previous one left it, so a scene with concurrent sleepers (Karpenter's actor thread) keeps
the speed mode. Timed things run in the sleeping thread, outside every lock of the clock: they may
write to the simulator, and schedule further timed things (which run in the same sleep if due).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sim.clock import SimClock

#: where a stepped clock starts unless told: a whole second (Kubernetes' timestamps have seconds
#: precision: a fraction at the start would move every deadline derived from one) on a fixed day,
#: so no outcome follows the date or the hour the test ran at
EPOCH = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)


@dataclass(eq=False)
class _Due:
    at: datetime
    seq: int
    action: Callable[[], object]
    cancelled: bool = False

    def __lt__(self, other: _Due) -> bool:  # the queue's order: time, then the order asked
        return (self.at, self.seq) < (other.at, other.seq)

    def cancel(self) -> None:
        self.cancelled = True


@dataclass(frozen=True)
class _Timed:
    """A source of timed things: when its next one falls due, and what runs it."""

    next_due: Callable[[], datetime | None]
    run: Callable[[], object]


class SteppedClock(SimClock):
    """Sim time that only `sleep` (or `advance`, the same) moves; timed things run inside it."""

    def __init__(self, start: datetime | None = None) -> None:
        super().__init__(speed=0, start=start or EPOCH)
        self._queue: list[_Due] = []
        self._seq = itertools.count()
        self._timed: list[_Timed] = []
        self._queue_lock = threading.Lock()
        self._stepping = threading.RLock()  # one sleeper at a time

    def call_later(self, seconds: float, action: Callable[[], object]) -> _Due:
        due = _Due(self.now() + timedelta(seconds=max(0.0, seconds)), next(self._seq), action)
        with self._queue_lock:
            heapq.heappush(self._queue, due)
        return due

    def add_timed(self, next_due: Callable[[], datetime | None], run: Callable[[], object]) -> None:
        """Register a source of timed things (the store's grace periods): ``run()`` once the clock
        reaches ``next_due()``."""
        self._timed.append(_Timed(next_due, run))

    def sleep(self, seconds: float) -> None:
        """Move ``seconds`` forward, running what falls due on the way (`advance`)."""
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("cannot go back in time")
        with self._stepping:
            target = self.now() + timedelta(seconds=seconds)
            while (step := self._next_by(target)) is not None:
                at, run = step
                self._move_to(at)
                run()
            self._move_to(target)

    def _next_by(self, target: datetime) -> tuple[datetime, Callable[[], object]] | None:
        """The earliest timed thing due at or before ``target`` (a queued action first on a tie)."""
        best: tuple[datetime, Callable[[], object]] | None = None
        with self._queue_lock:
            while self._queue and self._queue[0].cancelled:
                heapq.heappop(self._queue)
            if self._queue and self._queue[0].at <= target:
                first = self._queue[0]
                best = (first.at, lambda: self._run(first))
        for timed in self._timed:
            when = timed.next_due()
            if when is not None and when <= target and (best is None or when < best[0]):
                best = (when, timed.run)
        return best

    def _run(self, due: _Due) -> None:
        with self._queue_lock:
            if due.cancelled:
                return
            due.cancel()  # taken: dropped from the heap's head by the next look
        due.action()

    def _move_to(self, at: datetime) -> None:
        """Jump to ``at`` (never back): `now()` is ``at`` to the microsecond."""
        with self._lock:
            self._offset = max(self._offset, (at - self._start) / timedelta(microseconds=1) / 1e6)
        self._notify()

    def real_seconds_until(self, when: datetime) -> float | None:
        return None  # only a sleep reaches it
