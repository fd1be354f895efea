"""4. Mass interruption: 100 simultaneous Spot warnings on 100 GPU nodes (x 30 pods), one process
per concurrent Lambda, at the stack's configured concurrency.

Each node: owned by its NodeClaim (as Karpenter registers it), a device-plugin DaemonSet pod,
4 training pods opted in with `signal:SIGUSR1` (the simulated workload acks 10 s of sim time after
the signal) and 25 Job pods; 30 s grace periods.
The simulator runs in this process (its clock `Scale.speed` times real time); the Lambdas run as separate processes
(tests/bench/mass_child.py): as many interruption processes as the interruption function's
reserved concurrency (infra/config.py, cdk.json), and as many drain processes as the drain
function's reserved concurrency for the drain workflow's rounds.

Times are real seconds from the moment the 100 events are handed over to the (warm) processes:
every node cordoned, and every checkpoint request sent (the last SIGUSR1 delivered); drains are
judged against each event's deadline (event time + 120 s, sim time; the events are stamped when
they are handed over, after the processes are up). Beside them, the limit: the
simulator's own request ceiling on this machine (requests/s it serves to as many warm client
processes, back to back, per request type), and the peak rate it served during the run.

`GPUWARDEN_BENCH_MASS_RUNS` (default 3) runs the scene that many times on fresh simulators;
each figure is the median (and min/max) over the runs of that run's worst node.
`GPUWARDEN_BENCH_MASS_PROFILE=FILE` writes a cProfile of one interruption process's invocations;
`GPUWARDEN_BENCH_MASS_CONCURRENCY=N` is a what-if with another reserved concurrency (noted as such).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sim import KubeSim
from sim import builders as b
from sim.actors.workloads import Workloads
from tests.bench.cold_start import spot_event
from tests.bench.common import REPO, RESULT_PREFIX, Figure, bench_env, percentile, run_child
from tests.bench.ec2 import Instances, ec2_world

GOAL_CORDON_SECONDS = 2.0
GOAL_CHECKPOINT_SECONDS = 5.0
#: load processes for the ceiling: enough to keep the simulator busy (it is one process)
CEILING_CLIENTS = 10
CEILING_KINDS = ("get-node", "patch-node", "list-pods-on-node")


@dataclass(frozen=True)
class Scale:
    nodes: int = 100
    pods_per_node: int = 30
    signal_pods: int = 4
    #: real time: the drain rounds poll at the deployed Wait (1 s), not 5x faster against the same API
    speed: float = 1.0
    ceiling_seconds: float = 3.0


SCALE = Scale()
#: two nodes of three pods, two interruption processes and one drain process, a 10x sim clock
SMALLEST: dict[str, Any] = {
    "runs": 1,
    "workers": 2,
    "drainers": 1,
    "scale": Scale(nodes=2, pods_per_node=3, signal_pods=1, speed=10.0, ceiling_seconds=0.2),
}


def interruption_concurrency() -> int:
    """The interruption function's reserved concurrency as the stack deploys it: the context
    `interruptionConcurrency` in cdk.json, else the stack's default (infra/config.py)."""
    from infra.config import DEFAULT_INTERRUPTION_CONCURRENCY, INTERRUPTION_CONCURRENCY

    context = json.loads((REPO / "cdk.json").read_text()).get("context", {})
    return int(context.get(INTERRUPTION_CONCURRENCY, DEFAULT_INTERRUPTION_CONCURRENCY))


def drain_concurrency() -> int:
    """The drain function's reserved concurrency (infra/components/functions.py)."""
    from infra.components.functions import DRAIN

    return int(DRAIN.reserved_concurrency)


def _scene(sim: KubeSim, scale: Scale, ec2: Instances) -> list[tuple[str, str]]:
    sim.create(b.nodepool(gpu_limit=None))
    ds = sim.create(b.daemonset())
    made = []
    for n, (instance, name) in enumerate(ec2.launch(scale.nodes)):  # named as EKS names them: EC2's DNS name
        node = b.gpu_node(name, instance)
        claim = sim.create(b.nodeclaim_for(node))["metadata"]  # as Karpenter registers it: owned by its claim
        owner = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim["name"], "uid": claim["uid"]}
        node["metadata"]["ownerReferences"] = [owner | {"blockOwnerDeletion": True}]
        node = sim.create(node)
        sim.create(b.daemonset_pod(node, owner=ds))
        for p in range(scale.pods_per_node - 1):
            checkpoint = "signal:SIGUSR1" if p < scale.signal_pods else None
            sim.create(b.training_pod(f"job-{n}-{p}-worker", node, gpus=0, checkpoint=checkpoint, grace=30))
        made.append((name, instance))
    return made


def _peak_rate(sim: KubeSim, start: datetime, speed: float) -> tuple[int, float]:
    """Most requests in one real second, and the mean rate over the whole run."""
    bins: dict[int, int] = {}
    last = 0.0
    for r in sim.requests:
        real = (r.started - start).total_seconds() / speed
        bins[int(real)] = bins.get(int(real), 0) + 1
        last = max(last, real)
    return max(bins.values(), default=0), len(sim.requests) / last if last else 0.0


def ceiling(sim: KubeSim, kind: str, clients: int, node: str, seconds: float) -> float:
    """Requests/s the simulator serves to `clients` warm processes sending `kind` back to back."""
    env = bench_env(KUBECONFIG=str(sim.kubeconfig_path))
    cmd = [sys.executable, "-m", "tests.bench.mass_child", "--load", kind, str(seconds), node]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]
    for p in procs:
        assert p.stdout is not None
        while (line := p.stdout.readline()) and line.strip() != "GO":
            pass
    before = len(sim.requests)
    started = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        line = next(ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX))
        total += int(json.loads(line[len(RESULT_PREFIX) :])["requests"])
    elapsed = time.perf_counter() - started
    served = len(sim.requests) - before
    return max(total, served) / max(elapsed, seconds)


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by this process (the simulator's threads) and by its waited-for
    children (the Lambda processes, once the run's child has exited)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _real_after(stamps: list[str], ready: datetime, speed: float) -> float:
    latest = max(datetime.fromisoformat(s) for s in stamps)
    return (latest - ready).total_seconds() / speed


def one_run(workers: int, drainers: int, scale: Scale = SCALE) -> dict[str, Any]:
    speed = scale.speed
    with (
        KubeSim(clock_speed=speed) as sim,
        tempfile.TemporaryDirectory(prefix="gpuwarden-mass-") as tmp,
        ec2_world() as ec2,
    ):
        Workloads(sim, delay=10.0).install()
        nodes = _scene(sim, scale, ec2)
        spare = sim.create(b.gpu_node("ip-10-7-0-1.us-west-2.compute.internal", "i-0bb5500000000001"))
        sim.clear_requests()
        start = sim.clock.now()
        events = [spot_event(instance, f"mass-{i}", start) for i, (_, instance) in enumerate(nodes)]
        plan_file = Path(tmp) / "plan.json"
        plan = {
            "events": events,
            "anchor": start.isoformat(),
            "wall": time.time(),
            "speed": speed,
            "interruption_workers": workers,
            "drain_workers": drainers,
            "timeout": 240 / speed + 120,
            "profile": os.environ.get("GPUWARDEN_BENCH_MASS_PROFILE", ""),
        }
        plan_file.write_text(json.dumps(plan))
        env = bench_env(KUBECONFIG=str(sim.kubeconfig_path), AWS_ENDPOINT_URL=ec2.endpoint)
        sim_cpu, lambdas_cpu = _cpu_seconds()
        result = run_child(["-m", "tests.bench.mass_child", str(plan_file)], env, 900)
        sim_cpu, lambdas_cpu = (
            after - before for after, before in zip(_cpu_seconds(), (sim_cpu, lambdas_cpu), strict=True)
        )
        peak, mean = _peak_rate(sim, start, speed)
        requests = len(sim.requests)
        clients = min(workers, CEILING_CLIENTS)
        limits = {
            kind: ceiling(sim, kind, clients, spare["metadata"]["name"], scale.ceiling_seconds)
            for kind in CEILING_KINDS
        }
    by_node: dict[str, dict[str, Any]] = result["nodes"]
    ready = datetime.fromisoformat(result["ready"])
    cordons = [at for v in by_node.values() for at in v.get("cordon", [])]
    handled = [v for v in by_node.values() if "began" in v]

    def real(a: str, b: str) -> float:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() / speed

    signals = [at for v in by_node.values() for at in v.get("signal", [])]
    return {
        "cordoned": len(cordons),
        "cordon_s": _real_after(cordons, ready, speed) if cordons else float("nan"),
        "first_cordon_s": _real_after([min(cordons)], ready, speed) if cordons else float("nan"),
        "signalled": len(signals),
        "signal_s": _real_after(signals, ready, speed) if signals else float("nan"),
        "in_time": sum(1 for v in by_node.values() if v.get("outcome") == "drained"),
        # when each drain saw its node empty (120 s - what was left of the notice), not when the
        # round's bookkeeping after it returned
        "drained_sim_s": max(
            (120.0 - float(v["seconds_left"]) for v in by_node.values() if v.get("seconds_left") is not None),
            default=float("nan"),
        ),
        "invocation_s": percentile([real(v["began"], v["ended"]) for v in handled], 50.0),
        "cordon_in_invocation_s": percentile([real(v["began"], v["cordon"][0]) for v in handled if v["cordon"]], 50.0),
        "requests_per_invocation": percentile([float(v["requests"]) for v in handled], 50.0),
        "cpu_per_invocation_ms": 1000 * percentile([float(v["cpu"]) for v in handled], 50.0),
        "sim_cpu_s": sim_cpu,
        "lambdas_cpu_s": lambdas_cpu,
        "last_invocation_began_s": max((real(result["ready"], v["began"]) for v in handled), default=float("nan")),
        "requests": requests,
        "peak": peak,
        "mean": mean,
        "ceiling": limits,
        "errors": result["errors"],
        "error_count": result["error_count"],
        "processes": result["processes"],
        "load": os.getloadavg(),
    }


def _fig(name: str, unit: str, values: list[float], goal: str | None, met: bool | None, note: str = "") -> Figure:
    med = percentile(values, 50.0)
    return Figure(name, unit, med, min(values), max(values), len(values), goal, met, "median", med, note)


def measure(
    runs: int | None = None, workers: int | None = None, drainers: int | None = None, scale: Scale = SCALE
) -> tuple[list[Figure], dict[str, Any]]:
    # GPUWARDEN_BENCH_MASS_CONCURRENCY: a what-if (another reserved concurrency); the note says so
    workers = workers or int(os.environ.get("GPUWARDEN_BENCH_MASS_CONCURRENCY") or interruption_concurrency())
    drainers = drainers or drain_concurrency()
    count = runs or int(os.environ.get("GPUWARDEN_BENCH_MASS_RUNS", "3"))
    nodes, signal_pods = scale.nodes, scale.signal_pods
    done = [one_run(workers, drainers, scale) for _ in range(count)]
    cordon = [r["cordon_s"] if r["cordoned"] == nodes else float("inf") for r in done]
    signal = [r["signal_s"] if r["signalled"] == nodes * signal_pods else float("inf") for r in done]
    in_time = [float(r["in_time"]) for r in done]
    loads = ", ".join(f"{r['load'][0]:.1f}" for r in done)
    inv = percentile([r["invocation_s"] for r in done], 50.0)
    at = percentile([r["cordon_in_invocation_s"] for r in done], 50.0)
    per = percentile([r["requests_per_invocation"] for r in done], 50.0)
    cpu = percentile([r["cpu_per_invocation_ms"] for r in done], 50.0)
    sim_cpu = percentile([r["sim_cpu_s"] for r in done], 50.0)
    last = percentile([r["last_invocation_began_s"] for r in done], 50.0)
    why = (
        f"; an interruption invocation takes {inv:.2f} s median ({per:.0f} requests, {cpu:.0f} ms of its own CPU), "
        f"its cordon {at:.2f} s in; the simulator used {sim_cpu:.1f} CPU-s over the whole run; "
        f"{-(-nodes // workers)} per process in turn, so the last one began {last:.1f} s after the hand-over"
    )
    note = (
        f"{nodes} nodes x {scale.pods_per_node} pods; {workers} interruption processes "
        f"({'its reserved concurrency' if workers == interruption_concurrency() else 'WHAT-IF, not the stack'}) + "
        f"{drainers} drain processes (its reserved concurrency); sim clock {scale.speed:g}x; {len(done)} runs, "
        f"1-min load {loads} on "
        f"{os.cpu_count()} cores; failed invocations {[r['error_count'] for r in done]}"
    )
    figures = [
        _fig(
            "mass: all cordoned after",
            "s",
            cordon,
            f"max <= {GOAL_CORDON_SECONDS:g} s, all {nodes}",
            percentile(cordon, 50.0) <= GOAL_CORDON_SECONDS,
            note + why,
        ),
        _fig(
            "mass: first to last cordon",
            "s",
            [r["cordon_s"] - r["first_cordon_s"] for r in done],
            None,
            None,
            "the spread of the 100 cordons (the figure above also counts the first one's own latency)",
        ),
        _fig(
            "mass: every checkpoint request sent after",
            "s",
            signal,
            f"max <= {GOAL_CHECKPOINT_SECONDS:g} s, all {nodes * signal_pods}",
            percentile(signal, 50.0) <= GOAL_CHECKPOINT_SECONDS,
            "the last of the SIGUSR1 deliveries (pods/exec), from the events' hand-over",
        ),
        _fig(
            "mass: drained before deadline", "nodes", in_time, f">= {nodes} nodes", percentile(in_time, 50.0) >= nodes
        ),
        _fig("mass: all drained after (sim time)", "s", [r["drained_sim_s"] for r in done], None, None,
             "deadline 120 s after the event (sim time)"),
        _fig("mass: API requests/s peak", "req/s", [float(r["peak"]) for r in done], None, None,
             "the simulator's log, busiest real second of the run"),
    ]  # fmt: skip
    for kind in CEILING_KINDS:
        figures.append(
            _fig(
                f"sim ceiling: {kind}",
                "req/s",
                [r["ceiling"][kind] for r in done],
                None,
                None,
                f"the limit: {min(workers, CEILING_CLIENTS)} warm client processes, back to back, "
                f"{scale.ceiling_seconds:g} s",
            )
        )
    return figures, {"runs": done}
