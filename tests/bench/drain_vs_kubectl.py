"""3. gpuwarden's drain versus `kubectl drain --ignore-daemonsets --delete-emptydir-data`.

Two simulators built identically (30x clock), each with the ReplicaSetReplacer so guarded
pods come back on another node and the budget frees up. The node: 1 DaemonSet pod, 40
workload pods (20 Job pods with an emptyDir, 20 ReplicaSet pods) with 5-30 s grace periods
(sim time), 9 inference pods behind a PDB with maxUnavailable 3. Wall time and the API
requests in each simulator's request log. kubectl's discovery cache is warmed first (its
discovery requests are not counted; how many there would be is in the note).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from sim import KubeSim
from sim import builders as b
from sim.actors.controllers import ReplicaSetReplacer
from tests.bench.common import Figure, Skipped, bench_env, run_child

SPEED = 30.0
NODE = "gpu-a"
WORKLOAD_PODS = 40
GUARDED_PODS = 9
SMALLEST: dict[str, int] = {"workload_pods": 8, "guarded_pods": 3}


def build_scene(sim: KubeSim, workload_pods: int = WORKLOAD_PODS, guarded_pods: int = GUARDED_PODS) -> None:
    target = sim.create(b.gpu_node(NODE, "i-0d7a10000000000a1", ip="10.7.0.1"))
    other = sim.create(b.gpu_node("gpu-b", "i-0d7a10000000000b2", ip="10.7.0.2"))
    sim.create(b.gpu_node("gpu-c", "i-0d7a10000000000c3", ip="10.7.0.3"))
    sim.create(b.daemonset_pod(target, owner=sim.create(b.daemonset())))
    web = [sim.create(b.replicaset(f"web-{i}", "serving", {"app": f"web-{i}"}, workload_pods // 8)) for i in range(4)]
    for i in range(workload_pods):
        grace = 5 + (i * 25) // (workload_pods - 1)  # 5 … 30 s
        if i % 2 == 0:
            job = sim.create(b.job(f"train-{i}", "ml"))
            sim.create(b.training_pod(f"train-{i}-worker", target, gpus=1, checkpoint=None, owner=job, grace=grace))
        else:
            rs = web[i % 4]
            labels = rs["spec"]["selector"]["matchLabels"]
            sim.create(b.pod(f"{rs['metadata']['name']}-{i}", target, "serving", owner=rs, labels=labels, grace=grace))
    labels = {"app": "inference"}
    deployment = sim.create(b.deployment("inference", "serving", labels, guarded_pods + 3))
    rs = sim.create(b.replicaset("inference-7d9f", "serving", labels, guarded_pods + 3, deployment))
    for i in range(guarded_pods + 3):
        sim.create(b.inference_pod(f"inference-7d9f-{i}", target if i < guarded_pods else other, owner=rs, grace=10))
    sim.create(b.pdb("inference", "serving", labels, max_unavailable=3))


def _left_on_node(sim: KubeSim) -> int:
    pods = sim.list("Pod", field_selector=f"spec.nodeName={NODE}")
    return sum(1 for p in pods if not p["metadata"]["name"].startswith("nvidia-device-plugin"))


def _kubectl(sim: KubeSim, cache: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = ["kubectl", "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(cache), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def run_kubectl(workload_pods: int = WORKLOAD_PODS, guarded_pods: int = GUARDED_PODS) -> dict[str, Any]:
    with KubeSim(clock_speed=SPEED) as sim:
        build_scene(sim, workload_pods, guarded_pods)
        ReplicaSetReplacer(sim)
        cache = Path(sim.kubeconfig_path).parent / "kubectl-cache"
        _kubectl(sim, cache, "get", "nodes")  # discovery, as on an operator's machine
        discovery = len(sim.requests)
        sim.clear_requests()
        started = time.perf_counter()
        proc = _kubectl(sim, cache, "drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s")
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl drain failed: {proc.stderr[-2000:]}")
        return _summary(sim, seconds) | {"discovery_requests": discovery}


def run_gpuwarden(workload_pods: int = WORKLOAD_PODS, guarded_pods: int = GUARDED_PODS) -> dict[str, Any]:
    with KubeSim(clock_speed=SPEED) as sim:
        build_scene(sim, workload_pods, guarded_pods)
        ReplicaSetReplacer(sim)
        sim.clear_requests()
        result = run_child(["-m", "tests.bench.drain_child", NODE], bench_env(KUBECONFIG=str(sim.kubeconfig_path)))
        if result["outcome"] != "drained":
            raise RuntimeError(f"gpuwarden's drain ended {result['outcome']}")
        return _summary(sim, float(result["seconds"])) | {"rounds": result["rounds"], "blocked": result["blocked"]}


def _summary(sim: KubeSim, seconds: float) -> dict[str, Any]:
    requests = sim.requests
    by_verb: dict[str, int] = {}
    for r in requests:
        verb = "evict" if r.path.endswith("/eviction") else r.method
        by_verb[verb] = by_verb.get(verb, 0) + 1
    return {
        "seconds": seconds,
        "requests": len(requests),
        "evictions_429": sum(1 for r in requests if r.path.endswith("/eviction") and r.status == 429),
        "by_verb": by_verb,
        "left": _left_on_node(sim),
    }


def measure(
    workload_pods: int = WORKLOAD_PODS, guarded_pods: int = GUARDED_PODS
) -> tuple[list[Figure], dict[str, Any]]:
    if shutil.which("kubectl") is None:
        raise Skipped("kubectl is not on PATH: the drain comparison needs it")
    ours, theirs = run_gpuwarden(workload_pods, guarded_pods), run_kubectl(workload_pods, guarded_pods)
    time_ratio = ours["seconds"] / theirs["seconds"]
    request_ratio = ours["requests"] / theirs["requests"]
    note = (
        f"manual (voluntary) drain, {SPEED:g}x sim clock; gpuwarden {ours['seconds']:.2f} s / {ours['requests']} req "
        f"({ours['rounds']} rounds, {ours['evictions_429']} x 429) vs kubectl {theirs['seconds']:.2f} s / "
        f"{theirs['requests']} req ({theirs['evictions_429']} x 429, +{theirs['discovery_requests']} discovery "
        "with a cold cache)"
    )
    figures = [
        Figure("drain: gpuwarden / kubectl time", "ratio", time_ratio, time_ratio, time_ratio, 1, "<= 1.0 ratio",
               time_ratio <= 1.0, "ratio", time_ratio, note),
        Figure("drain: gpuwarden / kubectl requests", "ratio", request_ratio, request_ratio, request_ratio, 1,
               "<= 1.0 ratio", request_ratio <= 1.0, "ratio", request_ratio),
    ]  # fmt: skip
    return figures, {"gpuwarden": ours, "kubectl": theirs}
