"""Simulated clock: real elapsed time multiplied by a speed factor, plus manual advances."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Later(Protocol):
    """A timed action of `SimClock.call_later`, until it runs."""

    def cancel(self) -> None: ...


class SimClock:
    """Sim time = start + real elapsed x speed + manual advances.

    ``speed=0`` freezes the clock: only :meth:`advance` moves it (deterministic tests).
    """

    def __init__(self, speed: float = 1.0, start: datetime | None = None) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0")
        self._lock = threading.Lock()
        self._speed = speed
        self._start = (start or datetime.now(UTC)).astimezone(UTC)
        self._mono0 = time.monotonic()
        self._offset = 0.0  # sim seconds added by advance() and speed changes
        self._listeners: list[Callable[[], None]] = []

    @property
    def speed(self) -> float:
        return self._speed

    def set_speed(self, speed: float) -> None:
        """Change the speed factor without a jump in sim time."""
        with self._lock:
            now_s = self._elapsed_locked()
            self._speed = speed
            self._mono0 = time.monotonic()
            self._offset = now_s
        self._notify()

    def _elapsed_locked(self) -> float:
        return self._offset + (time.monotonic() - self._mono0) * self._speed

    def elapsed(self) -> float:
        """Sim seconds since the clock started."""
        with self._lock:
            return self._elapsed_locked()

    def now(self) -> datetime:
        """The current sim time, an aware UTC datetime."""
        return self._start + timedelta(seconds=self.elapsed())

    def advance(self, seconds: float) -> None:
        """Move sim time forward by ``seconds`` at once."""
        if seconds < 0:
            raise ValueError("cannot go back in time")
        with self._lock:
            self._offset += seconds
        self._notify()

    def real_seconds_until(self, when: datetime) -> float | None:
        """Real seconds until sim time reaches ``when`` (None when the clock is frozen)."""
        delta = (when - self.now()).total_seconds()
        if delta <= 0:
            return 0.0
        if self._speed == 0:
            return None
        return delta / self._speed

    def call_later(self, seconds: float, action: Callable[[], object]) -> Later:
        """Run ``action`` once ``seconds`` of sim time have passed (a timer thread here; on a
        `sim.stepped.SteppedClock`, inside the sleep that passes its time). ``cancel()`` drops it."""
        timer = threading.Timer(seconds / (self._speed or 1.0), action)
        timer.daemon = True
        timer.start()
        return timer

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each advance() or speed change (used to wake the reaper)."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()


def rfc3339(when: datetime) -> str:
    """Kubernetes' timestamp format (seconds precision, Z suffix)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
