"""4. Mass interruption: 100 Spot warnings at once (100 GPU nodes x 30 pods), 10 concurrent workers.

Each node: a device-plugin DaemonSet pod, 4 training pods opted in with `signal:SIGUSR1`
(the simulated workload acks 10 s of sim time after the signal) and 25 Job pods; 30 s
grace periods. The simulator runs here (sim clock `SPEED`x); the workers run in a child
process (tests/bench/mass_child.py). Times to cordon are real seconds from the moment the
100 events are handed over to the (warm) workers; drains are judged against each event's deadline (event time +
120 s, sim time). The request rate comes from the simulator's request log.
"""

from __future__ import annotations

import json
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from sim import KubeSim
from sim import builders as b
from sim.workloads import Workloads
from tests.bench.cold_start import spot_event
from tests.bench.common import Figure, bench_env, run_child

SPEED = 5.0
NODES = 100
PODS_PER_NODE = 30
SIGNAL_PODS = 4
WORKERS = 10
GOAL_CORDON_SECONDS = 5.0


def _scene(sim: KubeSim) -> list[tuple[str, str]]:
    sim.create(b.nodepool(gpu_limit=None))
    ds = sim.create(b.daemonset())
    made = []
    for n in range(NODES):
        name, instance = f"ip-10-6-{n // 200}-{n % 200 + 1}.us-west-2.compute.internal", f"i-0aa55{n:012x}"
        node = sim.create(b.gpu_node(name, instance, ip=f"10.6.{n // 200}.{n % 200 + 1}"))
        sim.create(b.daemonset_pod(node, owner=ds))
        for p in range(PODS_PER_NODE - 1):
            checkpoint = "signal:SIGUSR1" if p < SIGNAL_PODS else None
            sim.create(b.training_pod(f"job-{n}-{p}-worker", node, gpus=0, checkpoint=checkpoint, grace=30))
        made.append((name, instance))
    return made


def _peak_rate(sim: KubeSim, start: datetime) -> tuple[int, float]:
    """Most requests in one real second, and the mean rate over the whole run."""
    bins: dict[int, int] = {}
    last = 0.0
    for r in sim.requests:
        real = (r.started - start).total_seconds() / SPEED
        bins[int(real)] = bins.get(int(real), 0) + 1
        last = max(last, real)
    return max(bins.values(), default=0), len(sim.requests) / last if last else 0.0


def measure() -> tuple[list[Figure], dict[str, Any]]:
    with KubeSim(clock_speed=SPEED) as sim, tempfile.TemporaryDirectory(prefix="gpuwarden-mass-") as tmp:
        Workloads(sim, delay=10.0).install()
        nodes = _scene(sim)
        sim.clear_requests()
        start = sim.clock.now()
        events = [spot_event(instance, f"mass-{i}", start) for i, (_, instance) in enumerate(nodes)]
        plan_file = Path(tmp) / "plan.json"
        plan = {
            "events": events,
            "anchor": start.isoformat(),
            "wall": time.time(),
            "speed": SPEED,
            "workers": WORKERS,
            "timeout": 240 / SPEED + 60,
        }
        plan_file.write_text(json.dumps(plan))
        result = run_child(
            ["-m", "tests.bench.mass_child", str(plan_file)], bench_env(KUBECONFIG=str(sim.kubeconfig_path)), 600
        )
        peak, mean = _peak_rate(sim, start)
        requests = len(sim.requests)
    by_node: dict[str, dict[str, Any]] = result["nodes"]
    ready = datetime.fromisoformat(result["ready"])  # the workers are up: the events are handed over
    real = [
        (datetime.fromisoformat(v["cordoned_at"]) - ready).total_seconds() / SPEED
        for v in by_node.values()
        if v.get("cordoned_at")
    ]
    drained_sim = [
        (datetime.fromisoformat(v["drained_at"]) - start).total_seconds() for v in by_node.values() if "drained_at" in v
    ]
    in_time = sum(1 for v in by_node.values() if v.get("outcome") == "drained")
    note = (
        f"{NODES} nodes x {PODS_PER_NODE} pods, {WORKERS} workers (qps/burst from Settings), sim clock {SPEED:g}x; "
        f"{requests} requests, peak {peak}/s, mean {mean:.0f}/s; {result['error_count']} failed invocations"
    )
    figures = [
        Figure(
            "mass: all cordoned after",
            "s",
            _median(real),
            min(real, default=float("nan")),
            max(real, default=float("nan")),
            len(real),
            f"max <= {GOAL_CORDON_SECONDS:g} s, all {NODES}",
            len(real) == NODES and max(real) <= GOAL_CORDON_SECONDS,
            "max",
            max(real, default=float("nan")),
            note,
        ),
        Figure(
            "mass: all drained after (sim time)",
            "s",
            _median(drained_sim),
            min(drained_sim, default=float("nan")),
            max(drained_sim, default=float("nan")),
            len(drained_sim),
            None,
            None,
            "max",
            max(drained_sim, default=float("nan")),
            "deadline 120 s after the event (sim time)",
        ),
        Figure(
            "mass: drained before deadline", "nodes", in_time, in_time, in_time, 1,
            f">= {NODES} nodes", in_time >= NODES, "count", in_time,
        ),
        Figure("mass: API requests/s peak", "req/s", peak, peak, peak, 1, None, None, "max", peak),
    ]  # fmt: skip
    return figures, {"errors": result["errors"], "requests": requests, "mean_rate": mean}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")
