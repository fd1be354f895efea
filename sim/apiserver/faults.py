"""Fault injection: answer chosen requests with an error status, a delay, or a dropped connection."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sim.clock import SimClock


@dataclass(frozen=True)
class RequestInfo:
    """What a fault predicate sees."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes


@dataclass
class Fault:
    """One injected fault; ``remove()`` it or let ``count`` / ``until`` expire it."""

    method: str | None
    path: re.Pattern[str] | None
    status: int | None = None
    latency: float = 0.0  # real seconds
    reset: bool = False
    message: str | None = None
    retry_after: int | None = None
    #: ``details.causes`` of the Status (e.g. a PDB refusal's ``{"reason": "DisruptionBudget"}``)
    causes: tuple[dict[str, str], ...] = ()
    count: int | None = None  # None: unlimited
    until: datetime | None = None  # sim time
    predicate: Callable[[RequestInfo], bool] | None = None
    hits: int = 0
    _owner: FaultInjector | None = field(default=None, repr=False)

    def matches(self, req: RequestInfo, now: datetime) -> bool:
        if self.until is not None and now >= self.until:
            return False
        if self.count is not None and self.hits >= self.count:
            return False
        if self.method is not None and self.method.upper() != req.method:
            return False
        if self.path is not None and not self.path.fullmatch(req.path):
            return False
        return self.predicate is None or self.predicate(req)

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.hits >= self.count

    def remove(self) -> None:
        if self._owner is not None:
            self._owner.remove(self)


class FaultInjector:
    def __init__(self, clock: SimClock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def inject(
        self,
        *,
        status: int | None = None,
        latency: float = 0.0,
        reset: bool = False,
        method: str | None = None,
        path: str | None = None,
        count: int | None = None,
        until: datetime | None = None,
        duration: float | None = None,
        predicate: Callable[[RequestInfo], bool] | None = None,
        message: str | None = None,
        retry_after: int | None = None,
        causes: tuple[dict[str, str], ...] = (),
    ) -> Fault:
        """Add a fault. ``path`` is a regex matched against the whole URL path (no query).

        ``status``: answer with that code and a Status body (429 gets ``Retry-After``, default 1);
        ``latency``: sleep that many real seconds, then answer normally (or with ``status``);
        ``reset``: close the connection without answering. ``count`` limits how many requests
        it hits; ``until`` (sim time) or ``duration`` (sim seconds from now) limit how long.
        """
        if status is None and not latency and not reset:
            raise ValueError("a fault needs status, latency or reset")
        if duration is not None:
            until = self._clock.now() + timedelta(seconds=duration)
        if status == 429 and retry_after is None:
            retry_after = 1
        fault = Fault(
            method=method,
            path=re.compile(path) if path else None,
            status=status,
            latency=latency,
            reset=reset,
            message=message,
            retry_after=retry_after,
            causes=causes,
            count=count,
            until=until,
            predicate=predicate,
            _owner=self,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def active(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def match(self, req: RequestInfo) -> Fault | None:
        """The first matching fault, counted as hit (atomically)."""
        now = self._clock.now()
        with self._lock:
            for fault in self._faults:
                if fault.matches(req, now):
                    fault.hits += 1
                    return fault
        return None
