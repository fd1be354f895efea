"""Child of the mass-interruption benchmark: one process per concurrent Lambda, as deployed.

`python -m tests.bench.mass_child PLAN_JSON` with KUBECONFIG pointing at the simulator.

The orchestrator (this process's main thread) plays EventBridge, Lambda's async invocation queue
and the Step Functions loop; every invocation runs in a worker *process* (one invocation at a
time, its own ApiClient and KubeClient with the deployed rate limits), the way each Lambda
execution environment is its own process. Workers are forked from the orchestrator after it has
imported gpuwarden (a warm execution environment's imports, shared copy-on-write), so a hundred of
them fit this machine's memory and start in seconds:

* ``interruption`` workers: as many as the interruption function's reserved concurrency (read
  from the stack's definition, infra/components/functions.py). Each has its own inbox, and the
  orchestrator puts the next Spot warning in an idle worker's inbox (Lambda hands each execution
  environment its invocation; environments never queue behind each other's reads). It runs
  `handle_batch(..., drain_locally=False)`: cordon, checkpoint requests, replacement, and the drain
  workflow's start (`start_drain`).
* ``drain`` workers: the drain function's `round_of` rounds, `max(1, round(wait_seconds))` sim
  seconds apart (the workflow's Wait state), each round on whichever drain worker is free.

Every worker builds its dependencies and runs the handlers' init phase (`_runtime.warm`: the
cluster client built, the imports frozen out of the garbage collector's way) before the events
are handed over (warm execution environments), and reports `ready`; the plan's clock (anchor +
wall + speed) is the sim clock in every process. `python -m tests.bench.mass_child --load KIND
SECONDS` is a load generator for the simulator's own ceiling (see mass.py).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import json
import multiprocessing
import queue
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.bench.common import emit, quiet_handler_logs

#: the messages workers send the orchestrator: (type, payload)
Message = tuple[str, dict[str, Any]]


def sim_clock(anchor: str, wall: float, speed: float) -> Callable[[], datetime]:
    start = datetime.fromisoformat(anchor)

    def now() -> datetime:
        return start + timedelta(seconds=(time.time() - wall) * speed)

    return now


def sfn_wait(wait_seconds: float, speed: float) -> float:
    """The drain workflow's Wait state: `max(1, round(wait_seconds))` seconds (handlers/drain.py), in real seconds."""
    return max(1, round(wait_seconds)) / speed


# ------------------------------------------------------------------ a Lambda execution environment


def lambda_process(role: str, index: int, plan: dict[str, Any], tasks: Any, out: Any) -> None:
    """One execution environment: build the dependencies once, then one invocation at a time."""
    from gpuwarden.config import Settings
    from gpuwarden.handlers._runtime import warm
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import drain_round, handle_batch
    from gpuwarden.services.engine.context import Recorder
    from gpuwarden.services.engine.drain import DrainState
    from gpuwarden.wiring import build_deps

    quiet_handler_logs()
    speed = float(plan["speed"])
    clock = sim_clock(plan["anchor"], float(plan["wall"]), speed)

    def start_drain(state: dict[str, Any]) -> None:
        out.put(("drain", {"state": state, "delay": sfn_wait(float(state.get("wait_seconds", 0.5)), speed)}))

    deps = build_deps(Settings.from_env(), caller=f"{role}-{index}", start_drain=start_drain)
    warm(deps)  # the deployed handlers' init phase (handlers/_runtime.prepare)
    deps.clock = clock
    deps.window_clock = clock
    deps.sleep = lambda seconds: time.sleep(seconds / speed)
    profile = _profiler(role, index, plan)
    out.put(("ready", {"role": role, "index": index}))
    while (task := tasks.get()) is not None:
        try:
            if role == "interruption":
                began, sent, cpu = clock(), deps.kube.requests, time.process_time()  # type: ignore[attr-defined]
                if profile is not None:
                    profile.enable()
                result = handle_batch(parse_notices(task), deps, drain_locally=False)
                if profile is not None:
                    profile.disable()
                at = {t: [a["at"] for a in result.actions if a["type"] == t] for t in ("cordon", "signal")}
                report = {
                    "node": result.node,
                    "cordon": at["cordon"],
                    "signal": at["signal"],
                    "began": began.isoformat(),
                    "ended": clock().isoformat(),
                    "requests": deps.kube.requests - sent,  # type: ignore[attr-defined]
                    "cpu": time.process_time() - cpu,
                    "worker": index,
                }
                out.put(("handled", report))
                out.put(("idle", {"worker": index}))
                if result.drain and result.drain.get("done"):
                    out.put(("finished", {**result.drain, "at": clock().isoformat()}))
                continue
            recorder = Recorder(deps, task["event_id"])
            state = drain_round(recorder, DrainState.model_validate(task))  # the drain function's round
            late = [a["at"] for a in recorder.actions if a["type"] == "signal"]  # a round asked before the invocation
            if late:
                out.put(("signalled", {"node": state.node, "signal": late}))
            payload = state.model_dump(mode="json")
            if state.done:
                out.put(("finished", {**payload, "at": clock().isoformat()}))
            else:
                out.put(("drain", {"state": payload, "delay": sfn_wait(state.wait_seconds, speed)}))
        except Exception as err:  # a failed invocation: counted, as the DLQ would
            out.put(("error", {"error": f"{type(err).__name__}: {err}", "node": _node_of(task), "role": role}))
            if role == "interruption":
                out.put(("idle", {"worker": index}))
    if profile is not None:
        profile.dump_stats(plan["profile"])


def _profiler(role: str, index: int, plan: dict[str, Any]) -> Any:
    """cProfile of the first interruption process's invocations, when the plan asks for one."""
    if not plan.get("profile") or role != "interruption" or index != 0:
        return None
    import cProfile

    return cProfile.Profile()


def _node_of(task: Any) -> str | None:
    return task.get("node") if isinstance(task, dict) else None


# ------------------------------------------------------------------ the orchestrator


class Orchestrator:
    """EventBridge + Lambda's async queue (each event to an idle interruption environment, through
    that environment's own inbox, as Lambda hands each execution environment its own invocation:
    no environment waits on another's read) and the Step Functions loop (each drain round due
    after its Wait, to whichever drain worker is free)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.ctx = multiprocessing.get_context("fork")
        self.inboxes: list[Any] = [self.ctx.SimpleQueue() for _ in range(int(plan["interruption_workers"]))]
        self.idle: collections.deque[int] = collections.deque(range(len(self.inboxes)))
        self.waiting: collections.deque[dict[str, Any]] = collections.deque()
        self.rounds: Any = self.ctx.Queue()
        self.out: Any = self.ctx.Queue()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self.finished = 0
        self._due: list[tuple[float, int, dict[str, Any]]] = []
        self._seq = itertools.count()

    def start(self) -> list[Any]:
        procs = [
            self.ctx.Process(target=lambda_process, args=("interruption", i, self.plan, inbox, self.out), daemon=True)
            for i, inbox in enumerate(self.inboxes)
        ]
        procs += [
            self.ctx.Process(target=lambda_process, args=("drain", i, self.plan, self.rounds, self.out), daemon=True)
            for i in range(int(self.plan["drain_workers"]))
        ]
        for p in procs:
            p.start()
        ready = 0
        while ready < len(procs):
            kind, _ = self.out.get(timeout=300)
            ready += kind == "ready"
        return procs

    def invoke(self, events: list[dict[str, Any]]) -> None:
        """Events in: each to an idle environment at once, the rest as environments free up."""
        self.waiting.extend(events)
        while self.idle and self.waiting:
            self.inboxes[self.idle.popleft()].put(self.waiting.popleft())

    def stop(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for _ in range(int(self.plan["drain_workers"])):
            self.rounds.put(None)

    def handle(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "idle":
            self.idle.append(int(payload["worker"]))
            self.invoke([])
        elif kind == "handled":
            entry = self.nodes.setdefault(str(payload["node"]), {})
            signals = entry.get("signal", []) + payload.pop("signal")
            entry.update(payload, signal=signals)
        elif kind == "signalled":
            entry = self.nodes.setdefault(str(payload["node"]), {})
            entry["signal"] = entry.get("signal", []) + payload["signal"]
        elif kind == "drain":
            heapq.heappush(self._due, (time.monotonic() + payload["delay"], next(self._seq), payload["state"]))
        elif kind == "finished":
            self.nodes.setdefault(payload["node"], {}).update(
                drained_at=payload["at"], outcome=payload["outcome"], seconds_left=payload.get("seconds_left")
            )
            self.finished += 1
        elif kind == "error":
            self.errors.append(payload["error"])
            self.finished += 1  # that node's drain will not finish

    def run(self, expected: int, give_up: float) -> None:
        while self.finished < expected and time.monotonic() < give_up:
            while self._due and self._due[0][0] <= time.monotonic():
                self.rounds.put(heapq.heappop(self._due)[2])
            wait = self._due[0][0] - time.monotonic() if self._due else 0.05
            try:
                kind, payload = self.out.get(timeout=max(0.001, min(wait, 0.05)))
            except queue.Empty:
                continue
            self.handle(kind, payload)


def _preload() -> None:
    """What every execution environment imports, done once before the workers are forked."""
    import kubernetes.client
    import kubernetes.stream.ws_client  # noqa: F401


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    _preload()
    clock = sim_clock(plan["anchor"], float(plan["wall"]), float(plan["speed"]))
    orchestrator = Orchestrator(plan)
    procs = orchestrator.start()  # warm: every execution environment is up before t0
    ready = clock()
    sent = ready.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # EventBridge's `time`: whole seconds
    orchestrator.invoke([{**event, "time": sent} for event in plan["events"]])  # all 100 warnings at once, now
    orchestrator.run(len(plan["events"]), time.monotonic() + float(plan["timeout"]))
    orchestrator.stop()
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.terminate()
    emit(
        {
            "nodes": orchestrator.nodes,
            "errors": orchestrator.errors[:20],
            "error_count": len(orchestrator.errors),
            "ready": ready.isoformat(),
            "processes": len(procs),
        }
    )


# ------------------------------------------------------------------ the simulator's ceiling


def load(kind: str, seconds: float, node: str) -> None:
    """Send `kind` requests back to back for `seconds` (a warm client, no rate limit); print the count."""
    from gpuwarden.adapters.kube import KubeClient
    from gpuwarden.adapters.kubeconfig import client_from_kubeconfig

    kube = KubeClient(client_from_kubeconfig(str(Path(__import__("os").environ["KUBECONFIG"]))))
    calls: dict[str, Callable[[], object]] = {
        "get-node": lambda: kube.get_node(node),
        "list-pods-on-node": lambda: kube.list_pods_on_node(node),
        "patch-node": lambda: kube.patch_node(node, {"metadata": {"annotations": {"bench": str(time.time())}}}, None),
    }
    call = calls[kind]
    call()  # warm the connection
    sys.__stdout__.write("GO\n")  # type: ignore[union-attr]
    sys.__stdout__.flush()  # type: ignore[union-attr]
    sys.stdin.readline()  # every load process starts at once
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        call()
        done += 1
    emit({"requests": done, "seconds": seconds})


if __name__ == "__main__":
    if sys.argv[1] == "--load":
        load(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    else:
        main(sys.argv[1])
