"""Child of the mass-interruption benchmark: 10 workers, 100 Spot warnings, drains to the end.

`python -m tests.bench.mass_child PLAN_JSON` with KUBECONFIG pointing at the simulator.
The plan carries the Spot events and the simulator's clock (anchor + speed), so every
worker's `deps.clock` is the sim clock, as in the integration tests.

Each worker has its own dependencies (its own ApiClient and KubeClient, with the deployed
rate limits `Settings().kube_qps` / `kube_burst`), like one Lambda execution environment
each. Work is what the deployed functions do: an interruption invocation per event
(`handle_batch`, `drain_locally=False`) on one of 10 interruption workers (its reserved
concurrency), whose `start_drain` hands the drain to another 10 workers standing in for the
drain function under the Step Functions loop: `drain_step` rounds, `max(1, round(wait_seconds))`
sim seconds apart (its Wait state), taken by whichever worker is free. The workers' dependencies
are built before the events are handed over (warm execution environments).
"""

from __future__ import annotations

import heapq
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.bench.common import emit, quiet_handler_logs

Task = tuple[str, dict[str, Any]]


@dataclass
class Scheduler:
    """Tasks due at a real time; workers take the earliest due one."""

    expected_drains: int
    _heap: list[tuple[float, int, Task]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    finished: int = 0

    def put(self, task: Task, delay: float = 0.0) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), task))
            self._cond.notify()

    def done(self) -> None:
        with self._cond:
            self.finished += 1
            self._cond.notify_all()

    def take(self, deadline: float) -> Task | None:
        with self._cond:
            while self.finished < self.expected_drains and time.monotonic() < deadline:
                if self._heap and self._heap[0][0] <= time.monotonic():
                    return heapq.heappop(self._heap)[2]
                wait = self._heap[0][0] - time.monotonic() if self._heap else 0.05
                self._cond.wait(timeout=max(0.001, min(wait, 0.05)))
            return None


def sim_clock(anchor: str, wall: float, speed: float) -> Callable[[], datetime]:
    start = datetime.fromisoformat(anchor)

    def now() -> datetime:
        return start + timedelta(seconds=(time.time() - wall) * speed)

    return now


def main(plan_file: str) -> None:
    from gpuwarden.config import Settings
    from gpuwarden.services.context import Deps, Recorder
    from gpuwarden.services.dispatch import handle_batch
    from gpuwarden.services.drain import DrainState, drain_step
    from gpuwarden.sources import parse_notices
    from gpuwarden.wiring import build_deps

    quiet_handler_logs()
    plan = json.loads(Path(plan_file).read_text())
    speed = float(plan["speed"])
    clock = sim_clock(plan["anchor"], float(plan["wall"]), speed)
    scheduler = Scheduler(expected_drains=len(plan["events"]))  # the interruption function's invocations
    drains = Scheduler(expected_drains=len(plan["events"]))  # the drain workflow's rounds
    results: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    settings = Settings.from_env()

    def sfn_wait(wait_seconds: float) -> float:
        """The drain workflow's Wait state: `max(1, round(wait_seconds))` seconds (handlers/drain.py), sim time."""
        return max(1, round(wait_seconds)) / speed

    def make_deps(worker: int) -> Deps:
        def start_drain(state: dict[str, Any]) -> None:
            drains.put(("drain", state), sfn_wait(float(state.get("wait_seconds", 0.5))))

        deps = build_deps(settings, caller=f"worker-{worker}", start_drain=start_drain)
        deps.clock = clock
        deps.window_clock = clock
        deps.sleep = lambda seconds: time.sleep(seconds / speed)
        return deps

    def finish(state: Any, now: datetime) -> None:
        with lock:
            results.setdefault(state.node, {}).update(
                drained_at=now.isoformat(), outcome=state.outcome, seconds_left=state.seconds_left
            )
        drains.done()
        scheduler.done()

    def run_task(deps: Deps, task: Task) -> None:
        kind, payload = task
        if kind == "event":
            result = handle_batch(parse_notices(payload), deps, drain_locally=False)
            cordon = next((a["at"] for a in result.actions if a["type"] == "cordon"), None)
            with lock:
                results.setdefault(str(result.node), {}).update(cordoned_at=cordon, handled_at=clock().isoformat())
            if result.drain and result.drain.get("done"):
                finish(DrainState.model_validate(result.drain), clock())
            return
        state = drain_step(Recorder(deps, payload["event_id"]), DrainState.model_validate(payload))
        if state.done:
            finish(state, clock())
        else:
            drains.put(("drain", state.model_dump(mode="json")), sfn_wait(state.wait_seconds))

    give_up = time.monotonic() + float(plan["timeout"])
    errors: list[str] = []

    def worker(deps: Deps, queue: Scheduler) -> None:
        while (task := queue.take(give_up)) is not None:
            try:
                run_task(deps, task)
            except Exception as err:  # a failed invocation: counted, as the DLQ would
                with lock:
                    errors.append(f"{type(err).__name__}: {err}")
                drains.done()  # that node's drain will not finish
                scheduler.done()

    workers = int(plan["workers"])
    all_deps = [make_deps(i) for i in range(2 * workers)]  # warm workers: built before t0
    threads = [
        threading.Thread(target=worker, args=(d, scheduler if i < workers else drains), daemon=True)
        for i, d in enumerate(all_deps)
    ]
    ready = clock()
    for event in plan["events"]:
        scheduler.put(("event", event))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    emit({"nodes": results, "errors": errors[:20], "error_count": len(errors), "ready": ready.isoformat()})


if __name__ == "__main__":
    main(sys.argv[1])
