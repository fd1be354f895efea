"""An outage of the simulated API server from a chosen step of a Spot warning's first invocation:
the fault predicate `tests/reliability/test_drain_outage.py` and the executed drain workflow's
scenes (`tests/infra/test_drain_workflow_executed.py`) start (docs/reliability.md, "After the mark")."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

from sim import KubeSim
from sim.apiserver.faults import RequestInfo

OUTAGE_SECONDS = 20.0  # simulated; the client's own retries (about 1.5 s of real time) are far shorter


class OutageFrom:
    """A fault predicate: from the first request ``starts`` matches, every request is dropped for
    `OUTAGE_SECONDS` of simulated time (the API server gone: connections reset)."""

    def __init__(self, sim: KubeSim, starts: Callable[[RequestInfo], bool], seconds: float = OUTAGE_SECONDS) -> None:
        self.sim, self.starts, self.seconds = sim, starts, seconds
        self.began: datetime | None = None

    def __call__(self, req: RequestInfo) -> bool:
        now = self.sim.clock.now()
        if self.began is None:
            if not self.starts(req):
                return False
            self.began = now
        return now < self.began + timedelta(seconds=self.seconds)


def _first(method: str, pattern: str) -> Callable[[RequestInfo], bool]:
    compiled = re.compile(pattern)
    return lambda req: req.method == method and compiled.fullmatch(req.path) is not None


#: Where in a Spot warning's first invocation the outage starts (the request that meets it first).
STEPS: dict[str, Callable[[RequestInfo], bool]] = {
    "before the mark": lambda _req: True,
    "between the mark and the requests": _first("GET", r"/api/v1/pods"),
    "during the replacement": _first("POST", r"/apis/karpenter\.sh/v1/nodeclaims"),
    "during the first drain round": _first("POST", r"/api/v1/namespaces/[^/]+/pods/[^/]+/eviction"),
}
