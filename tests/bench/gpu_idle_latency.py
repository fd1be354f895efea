"""Event → node cordoned for gpu-idle on the simulator (20x clock) + moto: median of 20.

    .venv/bin/python -m tests.bench.gpu_idle_latency

Warm path (dependencies built once, as in a warm Lambda); the time runs from the call into the
service with the raw event to the simulator storing the node's `spec.unschedulable: true`. It
includes the guardrail reads (node, pods, node list), the CloudWatch GetMetricData re-check
(moto, in-process) and the RV-checked mark write.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

N = 20


def main() -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-west-2")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    from moto import mock_aws

    from gpuwarden.adapters.ledger import MemoryLedger
    from gpuwarden.config import Settings
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.kinds.registry import POLICY
    from gpuwarden.services.dispatch import handle_batch
    from gpuwarden.wiring import build_deps
    from sim import KubeSim
    from sim.builders import daemonset_pod, gpu_node, nodeclaim_for, nodepool
    from tests.integration.gpu_idle_cluster import IDLE, put_utilization

    sample = json.loads(
        (Path(__file__).resolve().parents[2] / "events/cloudwatch-alarm-contributor-state-change.json").read_text()
    )
    with mock_aws(), KubeSim(clock_speed=20.0) as sim:
        sim.create(nodepool("gpu-inference"))
        nodes: list[tuple[str, str]] = []
        for i in range(N + 1):
            name, instance = f"ip-10-0-6-{i + 10}.us-west-2.compute.internal", f"i-0{i:016x}"
            node = sim.create(gpu_node(name, instance, nodepool="gpu-inference"))
            sim.create(nodeclaim_for(node))
            sim.create(daemonset_pod(node))
            put_utilization(instance, name, IDLE)
            nodes.append((name, instance))
        cordoned: dict[str, float] = {}

        def on_change(kind: str, event: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if kind == "Node" and obj["spec"].get("unschedulable") and name not in cordoned:
                cordoned[name] = time.perf_counter()

        sim.on_change(on_change)
        policy = POLICY.model_validate({"cluster": "ml-prod", "gpu_idle": {"max_nodes_per_evaluation": N + 1}})
        deps = build_deps(
            Settings(region="us-west-2", cluster="ml-prod"),
            caller="bench",
            api_client=sim.api_client(),
            ledger=MemoryLedger(),
            policy=policy,
        )
        deps.clock = deps.window_clock = sim.clock.now
        deps.sleep = lambda s: time.sleep(s / 20.0)
        samples = []
        for i, (name, instance) in enumerate(nodes[:N]):
            event = json.loads(json.dumps(sample))
            event["id"] = f"bench-{i}"
            event["detail"]["alarmContributor"]["attributes"] = {"InstanceId": instance, "NodeName": name}
            started = time.perf_counter()
            result = handle_batch(parse_notices(event), deps).to_json()
            assert result["outcome"] == "handled", result["reason"]
            samples.append((cordoned[name] - started) * 1000)
    print(
        f"gpu-idle event -> node cordoned, n={N}: median {statistics.median(samples):.1f} ms, "
        f"min {min(samples):.1f} ms, max {max(samples):.1f} ms, first {samples[0]:.1f} ms"
    )


if __name__ == "__main__":
    main()
