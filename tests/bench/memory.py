"""5. Memory: peak RSS of one fresh process handling a Spot interruption on a 110-pod node.

The cold-start probe (same runtime: 3.13 + layer when available) runs the deployed
interruption handler to the end (no drain workflow configured, so it drains in-process);
`resource.getrusage(RUSAGE_SELF).ru_maxrss` at the end. Grace periods are 2 s, 8 pods
are `signal:` trainers acked after 1 s, on a real-time simulator.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from infra.components.functions import INTERRUPTION
from sim import KubeSim
from sim import builders as b
from sim.actors.workloads import Workloads
from tests.bench.cold_start import lambda_runtime, probe, spot_event
from tests.bench.common import Figure, bench_env, figure

PODS = 110
GOAL_MB = 200.0
SMALLEST: dict[str, int] = {"runs": 1, "pods": 10}


def measure(runs: int = 3, pods: int = PODS) -> list[Figure]:
    samples: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuwarden-mem-") as tmp, KubeSim(clock_speed=1.0) as sim:
        runtime = lambda_runtime(Path(tmp))
        Workloads(sim, delay=1.0).install()
        sim.create(b.nodepool())
        env = bench_env(KUBECONFIG=str(sim.kubeconfig_path))
        env.pop("PYTHONPATH")
        for run in range(runs):
            instance = f"i-0e3e{run:013x}"
            node = sim.create(b.gpu_node(f"mem-{run}", instance, ip=f"10.5.0.{run + 1}"))
            sim.create(b.daemonset_pod(node))
            for p in range(pods - 1):
                checkpoint = "signal:SIGUSR1" if p < 8 else None
                sim.create(b.training_pod(f"mem-{run}-{p}-w", node, gpus=0, checkpoint=checkpoint, grace=2))
            event = spot_event(instance, f"mem-{run}", sim.clock.now())
            own, _, _ = probe(runtime, INTERRUPTION.handler, event, env, Path(tmp))
            samples.append(float(own["maxrss_mb"]))
    note = f"{runtime.label}; {pods}-pod node drained to the end in-process"
    return [figure(f"peak RSS, spot interruption, {pods} pods", "MB", samples, goal=GOAL_MB, note=note)]
