"""GPU health on the simulator (warm, in-process, as a warm Lambda: the drain handed to the workflow).

- scan: 500 GPU nodes, 5 with `AcceleratedHardwareReady=False`: API requests before the first
  cordon (goal ≤ 2) and the time from the scan's start to the first cordon stored (goal ≤ 300 ms).
- alerts: one Alertmanager notification (AWS's JSON template) with 50 firing alerts, 50 nodes:
  handled in one invocation, within the GPU function's timeout (300 s), each node marked once.

    .venv/bin/python -m tests.bench.run --only gpu_health
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from tests.bench.common import Figure, figure

NODES = 500
UNHEALTHY = 5
RUNS = 5
ALERTS = 50
FUNCTION_TIMEOUT_SECONDS = 300.0


def _world() -> tuple[Any, Any, list[str], list[dict[str, Any]]]:
    from gpuwarden.adapters.ledger import MemoryLedger
    from gpuwarden.config import Settings
    from gpuwarden.domain.policy import Policy
    from gpuwarden.wiring import build_deps
    from sim import KubeSim
    from sim.builders import gpu_node, job, nodepool, training_pod

    sim = KubeSim(clock_speed=1.0).__enter__()
    sim.create(nodepool("gpu-training"))
    names = []
    for i in range(NODES):
        name = f"ip-10-1-{i // 250}-{i % 250}.us-west-2.compute.internal"
        sim.create(gpu_node(name, f"i-0{i:016x}", nodepool="gpu-training"))
        names.append(name)
    owner = sim.create(job("train", "ml"))
    for i, name in enumerate(names[: UNHEALTHY * RUNS + ALERTS]):
        sim.create(training_pod(f"train-{i}", name, checkpoint="annotate", owner=owner))
    handed: list[dict[str, Any]] = []
    deps = build_deps(
        Settings(region="us-west-2", cluster="ml-prod"),
        caller="bench",
        api_client=sim.api_client(),
        ledger=MemoryLedger(),
        policy=Policy(cluster="ml-prod", alerts={"GPUXidError": "gpu-unhealthy"}),
        start_drain=handed.append,
    )
    deps.clock = deps.window_clock = sim.clock.now
    return sim, deps, names, handed


def _fail(sim: Any, node: str) -> None:
    from sim.apiserver.api import STRATEGIC_PATCH
    from sim.clock import rfc3339

    since = rfc3339(sim.clock.now() - timedelta(seconds=5))
    condition = {
        "type": "AcceleratedHardwareReady",
        "status": "False",
        "reason": "NvidiaXID79Error",
        "message": "detected XID-79 on the instance, review kernel logs for additional information.",
        "lastHeartbeatTime": since,
        "lastTransitionTime": since,
    }
    # as the agent writes it: a strategic merge of status.conditions (merged by type)
    sim.patch_direct("Node", node, {"status": {"conditions": [condition]}}, patch_type=STRATEGIC_PATCH)


def _scan(sim: Any, deps: Any, names: list[str]) -> tuple[list[float], list[float]]:
    from gpuwarden.services.dispatch import handle_scan

    cordoned: list[float] = []

    def on_change(kind: str, event: str, obj: dict[str, Any]) -> None:
        if kind == "Node" and obj["spec"].get("unschedulable") and not cordoned:
            cordoned.append(time.perf_counter())

    sim.on_change(on_change)
    handle_scan(None, deps, drain_locally=False)  # warm: clients, imports, the first LIST
    latencies, requests = [], []
    for run in range(RUNS):
        for node in names[run * UNHEALTHY : (run + 1) * UNHEALTHY]:
            _fail(sim, node)
        cordoned.clear()
        before = len(sim.requests)
        started = time.perf_counter()
        result = handle_scan(None, deps, drain_locally=False).to_json()
        assert sum(r["outcome"] == "handled" for r in result["results"]) == UNHEALTHY, result["reason"]
        latencies.append((cordoned[0] - started) * 1000)
        made = sim.requests[before:]
        first = next(i for i, r in enumerate(made) if r.method == "PATCH" and r.path.startswith("/api/v1/nodes/"))
        requests.append(float(first))
        sim.clock.advance(60)
    return latencies, requests


def _notification(names: list[str]) -> dict[str, Any]:
    alerts = [
        {
            "status": "firing",
            "labels": {"alertname": "GPUXidError", "Hostname": name, "gpu": "0", "severity": "critical"},
            "annotations": {"summary": "XID 79"},
            "startsAt": "2026-11-24 06:43:26.841 +0000 UTC",
            "endsAt": "0001-01-01 00:00:00 +0000 UTC",
            "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": f"{i:016x}",
        }
        for i, name in enumerate(names)
    ]
    message = json.dumps({"receiver": "gpuwarden", "status": "firing", "alerts": alerts})
    sns = {
        "Type": "Notification",
        "MessageId": "bench-50",
        "TopicArn": "arn:aws:sns:us-west-2:123456789012:gpuwarden-alertmanager",
        "Message": message,
        "Timestamp": "2026-11-24T06:43:31.000Z",
    }
    return {"Records": [{"EventSource": "aws:sns", "Sns": sns}]}


def _alerts(sim: Any, deps: Any, names: list[str]) -> tuple[float, int, int]:
    from gpuwarden.domain.policy import GpuHealthPolicy, Policy
    from gpuwarden.services.dispatch import handle_alerts
    from gpuwarden.sources import parse_sns

    targets = names[UNHEALTHY * RUNS : UNHEALTHY * RUNS + ALERTS]
    # the pool holds 25 nodes from the scans already: a breaker that leaves room for all 50
    deps.policy = Policy(
        cluster="ml-prod", alerts={"GPUXidError": "gpu-unhealthy"}, gpu_health=GpuHealthPolicy(max_unhealthy_percent=20)
    )
    started = time.perf_counter()
    result = handle_alerts(parse_sns(_notification(targets)), deps, drain_locally=False).to_json()
    seconds = time.perf_counter() - started
    handled = sum(r["outcome"] == "handled" for r in result["results"])
    marks = sum(
        1
        for n in targets
        if (sim.get("Node", n)["metadata"].get("annotations") or {}).get("gpuwarden.io/kind") == "gpu-unhealthy"
    )
    return seconds, handled, marks


def measure() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench.common import quiet_handler_logs

    quiet_handler_logs()
    sim, deps, names, handed = _world()
    try:
        latencies, requests = _scan(sim, deps, names)
        seconds, handled, marks = _alerts(sim, deps, names)
    finally:
        sim.__exit__(None, None, None)
    figures = [
        figure(
            f"scan {NODES} GPU nodes ({UNHEALTHY} unhealthy): requests before the first cordon",
            "requests",
            requests,
            goal=2,
            stat="p100",
        ),
        figure(
            f"scan {NODES} GPU nodes ({UNHEALTHY} unhealthy): scan start -> first cordon",
            "ms",
            latencies,
            goal=300,
            stat="p100",
        ),
        figure(
            f"{ALERTS} firing alerts in one notification: one invocation",
            "s",
            [seconds],
            goal=FUNCTION_TIMEOUT_SECONDS,
            note=f"{handled} handled, {marks} nodes marked once each (of {ALERTS})",
        ),
    ]
    return figures, {"drains_handed_off": len(handed), "handled": handled, "marked": marks}


if __name__ == "__main__":
    from tests.bench.run import table

    found, details = measure()
    print(table(found))
    print(details)
