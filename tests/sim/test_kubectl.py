"""The real kubectl against the simulator: the proof that it behaves like an API server."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim import ExecResult, KubeSim
from sim import builders as b
from sim.actors.controllers import ReplicaSetReplacer
from sim.apiserver.disruption import pod_healthy
from tests.sim.kubectl import kubectl

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(
        shutil.which("kubectl") is None, reason="kubectl is not on PATH: kubectl fidelity tests skipped"
    ),
]


@pytest.fixture
def fast_sim(tmp_path: Path) -> Iterator[KubeSim]:
    """30x clock: a 30 s grace period lasts one real second."""
    with KubeSim(clock_speed=30) as s:
        yield s


def test_kubectl_get_nodes_and_pods_lists_the_cluster(fast_sim: KubeSim) -> None:
    summary = b.gpu_cluster(fast_sim, nodes=3)
    result = kubectl(fast_sim, "get", "nodes,pods", "-A")
    assert result.returncode == 0, result.stderr
    for name in summary.nodes:
        assert f"node/{name}" in result.stdout
    for ref in summary.training_pods + summary.inference_pods + summary.daemonset_pods:
        assert f"pod/{ref.split('/')[1]}" in result.stdout
    # server-side Table printing, as kubectl expects from a real server
    header = result.stdout.splitlines()[0].split()
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert "Running" in result.stdout
    kubectl(fast_sim, "cordon", summary.nodes[0])
    assert "Ready,SchedulingDisabled" in kubectl(fast_sim, "get", "node", summary.nodes[0]).stdout
    as_json = json.loads(kubectl(fast_sim, "get", "nodepools.karpenter.sh", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in as_json["items"]] == ["gpu-training"]
    selected = kubectl(fast_sim, "get", "pods", "-A", "-l", "app=inference", "-o", "name")
    assert sorted(selected.stdout.split()) == sorted(f"pod/{r.split('/')[1]}" for r in summary.inference_pods)


def test_kubectl_cordon_annotate_taint(fast_sim: KubeSim) -> None:
    fast_sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    assert kubectl(fast_sim, "cordon", "gpu-a").returncode == 0
    assert kubectl(fast_sim, "annotate", "node", "gpu-a", "gpuwarden.io/kind=spot-interruption").returncode == 0
    taint = kubectl(fast_sim, "taint", "node", "gpu-a", "gpuwarden.io/disruption=spot-interruption:NoSchedule")
    assert taint.returncode == 0, taint.stderr
    node = fast_sim.get("Node", "gpu-a")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpuwarden.io/kind"] == "spot-interruption"
    keys = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert keys == {("nvidia.com/gpu", "NoSchedule"), ("gpuwarden.io/disruption", "NoSchedule")}
    # removing one taint keeps the other; uncordon clears unschedulable
    assert kubectl(fast_sim, "taint", "node", "gpu-a", "gpuwarden.io/disruption-").returncode == 0
    assert kubectl(fast_sim, "uncordon", "gpu-a").returncode == 0
    node = fast_sim.get("Node", "gpu-a")
    assert node is not None
    assert [t["key"] for t in node["spec"]["taints"]] == ["nvidia.com/gpu"]
    assert not node["spec"].get("unschedulable")
    patches = [r.content_type for r in fast_sim.requests if r.method == "PATCH"]
    assert "application/strategic-merge-patch+json" in patches
    assert "application/merge-patch+json" in patches


def test_kubectl_exec_over_websocket_returns_the_exit_code(fast_sim: KubeSim) -> None:
    node = fast_sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    fast_sim.create(b.training_pod("train-0-w", node))
    fast_sim.exec_handler = lambda rec: ExecResult(
        exit_code=3 if rec.command == ["false"] else 0, stdout=f"ran {' '.join(rec.command)}\n"
    )
    ok = kubectl(fast_sim, "exec", "-n", "ml", "train-0-w", "-c", "trainer", "--", "kill", "-USR1", "1")
    assert (ok.returncode, ok.stdout) == (0, "ran kill -USR1 1\n")
    failed = kubectl(fast_sim, "exec", "-n", "ml", "train-0-w", "-c", "trainer", "--", "false")
    assert failed.returncode == 3
    bad = kubectl(fast_sim, "exec", "-n", "ml", "train-0-w", "-c", "nope", "--", "true")
    assert bad.returncode == 1
    assert "container nope is not valid for pod train-0-w" in bad.stderr
    assert [r.command for r in fast_sim.exec_log] == [["kill", "-USR1", "1"], ["false"]]


def _drain_scene(sim: KubeSim) -> tuple[list[str], str]:
    """gpu-a: device-plugin DaemonSet pod, a mirror pod, a training Job pod (emptyDir) and two of
    three inference replicas behind a PDB with minAvailable 2 (= one disruption at a time)."""
    a = sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    other = sim.create(b.gpu_node("gpu-b", "i-0bbb"))
    sim.create(b.gpu_node("gpu-c", "i-0ccc"))
    ds = sim.create(b.daemonset())
    dp = sim.create(b.daemonset_pod(a, owner=ds))
    sim.create(b.mirror_pod("kube-proxy", a))
    sim.create(b.training_pod("train-0-w", a, owner=sim.create(b.job("train-0"))))
    labels = {"app": "inference"}
    dep = sim.create(b.deployment("inference", "serving", labels, 3))
    rs = sim.create(b.replicaset("inference-abc", "serving", labels, 3, dep))
    guarded = ["inference-abc-1", "inference-abc-2"]
    for name in guarded:
        sim.create(b.inference_pod(name, a, owner=rs))
    sim.create(b.inference_pod("inference-abc-3", other, owner=rs))
    sim.create(b.pdb("inference", "serving", labels, min_available=2))
    return guarded, dp["metadata"]["name"]


def test_kubectl_drain_respects_daemonsets_mirror_pods_and_pdbs(fast_sim: KubeSim) -> None:
    # Given a node whose guarded pods may only go one at a time
    guarded, ds_pod = _drain_scene(fast_sim)
    replacer = ReplicaSetReplacer(fast_sim)
    healthy_seen: list[int] = []
    lock = threading.Lock()

    def watch_budget(kind: str, _event: str, _obj: dict[str, Any]) -> None:
        if kind == "Pod":
            pods = fast_sim.list("Pod", "serving", label_selector="app=inference")
            with lock:
                healthy_seen.append(sum(1 for p in pods if pod_healthy(p)))

    fast_sim.on_change(watch_budget)

    # When kubectl drains it
    result = kubectl(fast_sim, "drain", "gpu-a", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")

    # Then the drain succeeded only through the eviction API, with 429s while the budget was spent
    assert result.returncode == 0, result.stderr
    evictions = [r for r in fast_sim.requests if r.path.endswith("/eviction")]
    assert any(r.status == 429 for r in evictions), "the PDB never blocked an eviction"
    assert {r.path.split("/")[-2] for r in evictions if r.status == 201} == {*guarded, "train-0-w"}
    assert not [r for r in fast_sim.requests if r.method == "DELETE"]
    # never fewer healthy guarded pods than minAvailable
    assert min(healthy_seen) >= 2
    # end state: cordoned; only the DaemonSet pod and the mirror pod are left on the node
    node = fast_sim.get("Node", "gpu-a")
    assert node is not None
    assert node["spec"]["unschedulable"] is True
    left = sorted(p["metadata"]["name"] for p in fast_sim.list("Pod", field_selector="spec.nodeName=gpu-a"))
    assert left == sorted([ds_pod, "kube-proxy-gpu-a"])
    assert len(replacer.created) == 2
    assert "evicting pod serving/inference-abc" in result.stderr + result.stdout
