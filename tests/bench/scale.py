"""11. At the size GPU clusters are (issue 44): 100 and 1,000 GPU nodes, on the simulator and on the
real control plane (KWOK nodes; docs/realplane.md), side by side. The nodes a warning names carry
30 pods each (the Spot warning's figures are one node's); the others 30 at 100 nodes and 5 at
1,000 (`FILLER_PODS`: 5,275 pods, not 30,000, so that the whole of `make bench` fits ~25 minutes
on 2 cores; every figure's note says how many pods the cluster had).

Per cluster, one function environment at a time in a process of its own (`scale_child`), with
EC2 in a moto server that knows the warned instances as Karpenter tags them:

- Spot warning, our node (a fresh instance each run; the first run warms the environment): the
  Kubernetes requests (Events apart, as in `latency`), the bytes of their answers (as JSON, and
  on the wire: gzip where the server compressed them), notice →
  cordoned, the process's peak memory. Goals ≤ 14 requests, ≤ 100 KB, p99 ≤ 50 ms, at any size;
- Spot warning, an instance of another cluster (its tags say so): goal no Kubernetes request;
- GPU-health scan with 5 newly unhealthy nodes (a scan of the minute before first): to the first
  write (≤ 300 ms), requests, bytes, peak memory (≤ 512 MB);
- the windows function's reconcile: requests, bytes, seconds, peak memory (≤ 512 MB);
- `release --all` (after the runs above left their marks): requests, bytes, seconds, peak memory.

The real plane is skipped (said so) when it is not built. Cluster objects are created by
`CREATORS` threads at once, their answers not deserialized (the plane's admin identity is exempt
from priority and fairness, as an installer's is), the warned nodes' pods first; then every pod is
waited for Running (KWOK's pod-ready stage), from the API server's watch cache. Creating and
waiting share a time budget per cluster (`BUDGET`): when it runs out, the runs go on with what
exists and the figures' note says what was reached (nodes, pods, pods not yet Running).

    .venv/bin/python -m tests.bench.run --only scale
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench.common import Figure, Skipped, bench_env, figure, warm_process
from tests.bench.ec2 import CLUSTER, Instances, ec2_world

SIZES = (100, 1000)
PODS_PER_NODE = 30
#: Pods on each node no warning names, by the cluster's size: 30,000 KWOK pods took the real plane
#: past its budget (6,693 made in 900 s at load 17) and kept KWOK busy through the runs
FILLER_PODS = {100: 30, 1000: 5}
RUNS = 10
SCANS = 3
UNHEALTHY = 5
POLICY = f'{{"cluster": "{CLUSTER}"}}'
SMALLEST: dict[str, Any] = {"sizes": (12,), "pods_per_node": 2, "runs": 1, "scans": 1, "real": False}
GOALS = {"requests": 14.0, "kb": 100.0, "cordon_p99": 50.0, "first_write": 300.0, "memory": 512.0}
NAMESPACE = "scale"
CREATORS = 16  # threads creating the cluster's objects
#: Seconds per cluster to create its objects and see its pods Running; then the runs go on with
#: what was reached, said in the figures' note
BUDGET = {"simulator": 300.0, "real plane": 300.0}


@dataclass(frozen=True)
class Populated:
    """What `Cluster.populate` reached before its deadline."""

    nodes: int
    pods: int
    wanted_pods: int
    seconds: float
    not_running: int  # pods not Running when the wait ended (0: all; -1: not waited for)

    def note(self) -> str:
        made = f"{self.pods:,} of {self.wanted_pods:,} pods" if self.pods < self.wanted_pods else f"{self.pods:,} pods"
        running = "" if self.not_running <= 0 else f", {self.not_running:,}+ not Running yet"
        return f"{self.nodes:,} nodes, {made} (created in {self.seconds:.0f} s{running})"


class Cluster:
    """Where the nodes go: ``node(name, instance)`` and ``pod(name, node)`` make the objects,
    ``create`` stores them (thread-safe), ``fail`` marks a node's GPUs unhealthy,
    ``not_running(deadline)`` waits until every pod runs or the deadline and answers how many do not."""

    def __init__(self, label: str, env: dict[str, str], create: Callable[[dict[str, Any]], object]) -> None:
        self.label, self.env, self.create = label, env, create
        self.node: Callable[[str, str], dict[str, Any]]
        self.pod: Callable[[str, str], dict[str, Any]]
        self.fail: Callable[[str], None]
        self.not_running: Callable[[float], int] = lambda _deadline: -1

    def populate(
        self, nodes: list[tuple[str, str]], pods_per_node: int, budget: float, warned: int = 0, filler_pods: int = 0
    ) -> Populated:
        """Every node, then their pods in the nodes' order (the warned nodes' first: the first
        ``warned`` nodes ``pods_per_node`` each, the others ``filler_pods``, or as many), by
        `CREATORS` threads at once, until ``budget`` seconds have passed: what was not created by
        then is not, and the answer says so (a benchmark that reports, never one that hangs)."""
        began = time.monotonic()
        deadline = began + budget

        def make(obj: dict[str, Any]) -> bool:
            if time.monotonic() > deadline:
                return False
            self.create(obj)
            return True

        with ThreadPoolExecutor(CREATORS) as pool:
            made_nodes = sum(pool.map(make, (self.node(n[1], n[0]) for n in nodes)))
            counts = [pods_per_node if i < warned or not filler_pods else filler_pods for i in range(len(nodes))]
            pods = (
                self.pod(f"{name}-p{p}", name) for (_, name), n in zip(nodes, counts, strict=True) for p in range(n)
            )
            made_pods = sum(pool.map(make, pods))
        seconds = time.monotonic() - began
        waiting = self.not_running(deadline)
        return Populated(made_nodes, made_pods, sum(counts), seconds, waiting)


@contextmanager
def _sim_cluster(endpoint: str) -> Iterator[Cluster]:
    from sim import KubeSim
    from sim import builders as b
    from tests.bench.gpu_health import _fail

    with KubeSim(clock_speed=1.0) as sim:
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        sim.create(b.nodepool("gpu-training"))
        env = bench_env(KUBECONFIG=str(sim.kubeconfig_path), AWS_ENDPOINT_URL=endpoint)
        cluster = Cluster("simulator", env, lambda obj: sim.create(obj))
        cluster.node = lambda name, instance: b.gpu_node(name, instance)
        cluster.pod = lambda name, node: b.inference_pod(name, node, namespace=NAMESPACE)
        cluster.fail = lambda node: _fail(sim, node)
        yield cluster


@contextmanager
def _real_cluster(endpoint: str) -> Iterator[Cluster]:
    from kubernetes import client

    from tests.bench.realplane import _Cluster, _node, _plane, _pod

    with tempfile.TemporaryDirectory(prefix="gpuwarden-bench-scale-") as tmp, _plane(Path(tmp)) as (plane, env):
        admin = _Cluster(plane)
        admin.namespace(NAMESPACE)
        api = plane.api_client()
        api.configuration.connection_pool_maxsize = CREATORS  # one kept-alive connection per creator
        core: Any = client.CoreV1Api(api)

        def create(obj: dict[str, Any]) -> None:
            # the answer is read as bytes and dropped: deserializing 31,000 models would cost this
            # process more CPU than the API server spends storing them
            if obj["kind"] == "Node":
                answer = core.create_node(obj, _preload_content=False)
            else:
                answer = core.create_namespaced_pod(NAMESPACE, obj, _preload_content=False)
            answer.read()
            answer.release_conn()

        def fail(node: str) -> None:  # as the node monitoring agent writes it (tests/bench/gpu_health.py)
            core.patch_node_status(node, {"status": {"conditions": [_unhealthy()]}})

        def not_running(deadline: float) -> int:
            # from the API server's watch cache (resourceVersion 0): one cheap filter per poll, never
            # a read of every pod from etcd; the answer's length is how many KWOK has not run yet
            def pending() -> int:
                answer = core.list_namespaced_pod(
                    NAMESPACE, field_selector="status.phase!=Running", resource_version="0", _preload_content=False
                )
                return len(json.loads(answer.read()).get("items") or [])

            left = pending()
            while left and time.monotonic() < deadline:
                print(f"[bench] scale: {left:,} pods not Running yet", file=sys.stderr, flush=True)
                time.sleep(5.0)
                left = pending()
            return left

        cluster = Cluster("real plane", env | {"AWS_ENDPOINT_URL": endpoint}, create)
        cluster.node = lambda name, instance: _node(name, instance)
        cluster.pod = lambda name, node: _pod(name, node, None)
        cluster.fail = fail
        cluster.not_running = not_running
        yield cluster


def _unhealthy() -> dict[str, str]:
    from datetime import UTC, datetime

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": "AcceleratedHardwareReady",
        "status": "False",
        "reason": "NvidiaXID79Error",
        "message": "detected XID-79 on the instance, review kernel logs for additional information.",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _one_size(
    cluster: Cluster, ec2: Instances, size: int, pods_per_node: int, runs: int, scans: int
) -> tuple[list[Figure], str]:
    ours = ec2.launch(runs + 1, CLUSTER)  # +1: the warm-up
    ((other, _),) = ec2.launch(1, "ml-staging")
    filler = [
        (f"i-0f{size:04x}{i:011x}", f"ip-10-{200 + i // 62500}-{i // 250 % 250}-{i % 250}.us-west-2.compute.internal")
        for i in range(size - len(ours))
    ]
    reached = cluster.populate(
        ours + filler, pods_per_node, BUDGET[cluster.label], warned=len(ours), filler_pods=FILLER_PODS.get(size, 0)
    )
    where = f"{cluster.label}, {size} nodes"
    spread = f"{pods_per_node} pods on each warned node, {FILLER_PODS.get(size, pods_per_node)} on the others"
    note = f"{cluster.label}: {reached.note()}, {spread}; {_load()}"
    spots, others = [], []
    with warm_process("tests.bench.scale_child", [POLICY], cluster.env) as function:
        for i, (instance, _) in enumerate(ours):
            answer = function.ask({"op": "spot", "instance": instance, "event_id": f"scale-{size}-{i}"})
            assert answer["outcome"] == "handled", answer
            if i:
                spots.append(answer)
        others.append(function.ask({"op": "spot", "instance": other, "event_id": f"scale-{size}-other"}))
    scan_answers = []
    with warm_process("tests.bench.scale_child", [POLICY], cluster.env) as function:
        function.ask({"op": "scan"})  # the minute before's scan: nothing failing yet
        for run in range(scans):
            for _, name in filler[run * UNHEALTHY : (run + 1) * UNHEALTHY]:
                cluster.fail(name)
            scan_answers.append(function.ask({"op": "scan"}))
    with warm_process("tests.bench.scale_child", [POLICY], cluster.env) as function:
        reconcile = function.ask({"op": "reconcile"})
    with warm_process("tests.bench.scale_child", [POLICY], cluster.env) as function:
        release = function.ask({"op": "release"})
    kb = [s["received"] / 1024 for s in spots]
    figures = [
        figure(
            f"{where}: Spot warning, our node: requests (Events apart)",
            "requests",
            [float(s["requests"] - s["events"]) for s in spots],
            goal=GOALS["requests"],
            stat="p100",
            note=note,
        ),
        figure(f"{where}: Spot warning, our node: received", "KB", kb, goal=GOALS["kb"], stat="p100"),
        figure(f"{where}: Spot warning, our node: on the wire", "KB", [s["wire"] / 1024 for s in spots], stat="p100"),
        figure(
            f"{where}: Spot warning, our node: notice → cordoned (p99)",
            "ms",
            [s["first_write_ms"] for s in spots],
            goal=GOALS["cordon_p99"],
            stat="p99",
        ),
        figure(f"{where}: Spot warning, our node: peak memory", "MB", [s["peak_mb"] for s in spots], stat="p100"),
        figure(
            f"{where}: Spot warning, another cluster's instance: requests",
            "requests",
            [float(o["requests"]) for o in others],
            goal=0.0,
            stat="p100",
            note=f"outcome {others[0]['outcome']}: {others[0]['reason']}",
        ),
        figure(
            f"{where}: scan ({UNHEALTHY} unhealthy): start → first write",
            "ms",
            [s["first_write_ms"] for s in scan_answers],
            goal=GOALS["first_write"],
            stat="p100",
        ),
        figure(
            f"{where}: scan: requests / received",
            "KB",
            [s["received"] / 1024 for s in scan_answers],
            stat="p100",
            note=f"{scan_answers[-1]['requests']} requests",
        ),
        figure(f"{where}: scan: on the wire", "KB", [s["wire"] / 1024 for s in scan_answers], stat="p100"),
        figure(
            f"{where}: scan: peak memory", "MB", [s["peak_mb"] for s in scan_answers], goal=GOALS["memory"], stat="p100"
        ),
        figure(
            f"{where}: reconcile: seconds",
            "s",
            [reconcile["seconds"]],
            stat="p100",
            note=(
                f"{reconcile['requests']} requests, {reconcile['received'] / 1024:.0f} KB "
                f"({reconcile['wire'] / 1024:.0f} KB on the wire), "
                f"first write {reconcile['first_write_ms']} ms, outcome {reconcile['outcome']}"
            ),
        ),
        figure(f"{where}: reconcile: peak memory", "MB", [reconcile["peak_mb"]], goal=GOALS["memory"], stat="p100"),
        figure(
            f"{where}: release --all: seconds",
            "s",
            [release["seconds"]],
            stat="p100",
            note=(
                f"{release['requests']} requests, {release['received'] / 1024:.0f} KB "
                f"({release['wire'] / 1024:.0f} KB on the wire), outcome {release['outcome']}"
            ),
        ),
        figure(f"{where}: release --all: peak memory", "MB", [release["peak_mb"]], stat="p100"),
    ]
    return figures, reached.note()


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def measure(
    sizes: tuple[int, ...] = SIZES,
    pods_per_node: int = PODS_PER_NODE,
    runs: int = RUNS,
    scans: int = SCANS,
    real: bool = True,
    sim: bool = True,
) -> tuple[list[Figure], dict[str, Any]]:
    figures: list[Figure] = []
    skipped: list[str] = []
    failed: list[str] = []
    reached: dict[str, str] = {}
    planes: list[Callable[[str], AbstractContextManager[Cluster]]] = [_sim_cluster] if sim else []
    planes += [_real_cluster] if real else []
    for make in planes:
        for size in sizes:
            with ec2_world() as ec2:
                try:
                    with make(ec2.endpoint) as cluster:
                        found, reached[f"{cluster.label}, {size} nodes"] = _one_size(
                            cluster, ec2, size, pods_per_node, runs, scans
                        )
                        figures += found
                except Skipped as why:
                    skipped.append(str(why))
                    break
                except Exception as err:
                    if make is _sim_cluster:
                        raise
                    # the real plane's part fails alone: the simulator's figures still stand
                    failed.append(f"real plane, {size} nodes: {type(err).__name__}: {err}"[:2000])
                    print(f"[bench] scale: {failed[-1]}", file=sys.stderr, flush=True)
                    break
    if not figures:
        raise Skipped("; ".join(skipped))
    return figures, {"reached": reached, "skipped": skipped, "real_plane_failed": failed, "load": _load()}
