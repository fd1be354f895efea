"""The Kubernetes adapter's client-side rate limit (`KubeClient`)."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """A token bucket, like client-go's QPS/burst: keeps a mass interruption polite.

    It paces the bulk of a drain (pod lists, evictions, deletes, Events, PDBs). The few urgent
    calls per node — finding the node (node reads), the cordon/taint PATCH, the checkpoint
    request PATCH and the signal (exec) — skip it: they decide how much of a two-minute notice
    a training job keeps, and the API server's own priority and fairness still answers 429
    (retried) if it must.
    """

    def __init__(self, qps: float, burst: int) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        if self._qps <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._qps)
            self._stamp = now
            self._tokens -= 1.0
            wait = -self._tokens / self._qps if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
