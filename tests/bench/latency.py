"""2. Notice → node cordoned, notice → last checkpoint signal sent: a warm handler, fresh node each run.

Each run is a fresh Spot GPU node (Karpenter) running a device-plugin DaemonSet pod and 8
training pods opted in with `gpuwarden.io/checkpoint: signal:SIGUSR1`. The simulator (this
process, real-time clock) answers the signals' pods/exec like the workload would and acks
later; the handler runs in a child process (its own interpreter, as a Lambda would).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from sim import KubeSim
from sim import builders as b
from sim.actors.workloads import Workloads
from tests.bench.common import Figure, bench_env, figure, run_child
from tests.bench.ec2 import Instances, ec2_world

SIGNAL_PODS = 8
GOALS = {"cordon_p50": 20.0, "cordon_p99": 50.0, "last_signal_p50": 200.0}
SMALLEST: dict[str, int] = {"runs": 1}


def _scene(sim: KubeSim, runs: int, ec2: Instances) -> list[tuple[str, str]]:
    sim.create(b.nodepool())
    made = []
    for i, (instance, name) in enumerate(ec2.launch(runs)):  # named as EKS names them: EC2's DNS name
        node = sim.create(b.gpu_node(name, instance))
        sim.create(b.daemonset_pod(node))
        for p in range(SIGNAL_PODS):
            sim.create(b.training_pod(f"train-{i}-{p}-worker", node, gpus=1, checkpoint="signal:SIGUSR1"))
        made.append((instance, f"latency-{i}"))
    return made


def measure(runs: int = 50) -> list[Figure]:
    with (
        KubeSim(clock_speed=1.0) as sim,
        tempfile.TemporaryDirectory(prefix="gpuwarden-latency-") as tmp,
        ec2_world() as ec2,
    ):
        Workloads(sim, delay=5.0).install()
        plan = _scene(sim, runs + 1, ec2)  # +1 warm-up
        runs_file = Path(tmp) / "runs.json"
        runs_file.write_text(json.dumps(plan))
        env = bench_env(KUBECONFIG=str(sim.kubeconfig_path), AWS_ENDPOINT_URL=ec2.endpoint)
        result = run_child(["-m", "tests.bench.latency_child", str(runs_file)], env)
    samples = result["samples"]
    cordon = [s["cordon_ms"] for s in samples]
    signal = [s["last_signal_ms"] for s in samples]
    returned = [s["returned_ms"] for s in samples]
    signalled = {int(s["signals"]) for s in samples}
    note = f"{SIGNAL_PODS} signal pods/node, signals per run {sorted(signalled)}; handler returned (p50) "
    note += f"{sorted(returned)[len(returned) // 2]:.0f} ms; warm-up run cordon {result['warmup']['cordon_ms']:.0f} ms"
    return [
        figure("notice → cordoned (p50)", "ms", cordon, goal=GOALS["cordon_p50"], stat="p50", note=note),
        figure("notice → cordoned (p99)", "ms", cordon, goal=GOALS["cordon_p99"], stat="p99"),
        figure("notice → last signal sent (p50)", "ms", signal, goal=GOALS["last_signal_p50"], stat="p50"),
        figure("notice → last signal sent (p99)", "ms", signal, stat="p99"),
    ]
