"""KubeSim's own surface: kubeconfig, direct access, on_change, clock, builders."""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client, config

from sim import KubeSim, SimClock
from sim import builders as b
from sim.clock import rfc3339


def test_kubeconfig_is_accepted_by_load_kube_config(sim: KubeSim, node: dict[str, Any]) -> None:
    api = config.new_client_from_config(config_file=str(sim.kubeconfig_path))  # type: ignore[no-untyped-call]
    core: Any = client.CoreV1Api(api)
    assert [n.metadata.name for n in core.list_node().items] == ["gpu-a"]
    assert sim.requests[-1].status == 200


def test_on_change_lets_a_workload_ack_a_checkpoint(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    sim.create(b.training_pod("train-0-w", node, checkpoint="annotate"))

    def ack(kind: str, event: str, obj: dict[str, Any]) -> None:
        notes = obj["metadata"].get("annotations") or {}
        if (
            kind == "Pod"
            and "gpuwarden.io/checkpoint-requested" in notes
            and "gpuwarden.io/checkpoint-done" not in notes
        ):
            done = {"metadata": {"annotations": {"gpuwarden.io/checkpoint-done": rfc3339(sim.clock.now())}}}
            sim.patch_direct("Pod", obj["metadata"]["name"], done, obj["metadata"]["namespace"])

    sim.on_change(ack)
    requested = {"metadata": {"annotations": {"gpuwarden.io/checkpoint-requested": rfc3339(sim.clock.now())}}}
    core.patch_namespaced_pod("train-0-w", "ml", requested)
    pod = core.read_namespaced_pod("train-0-w", "ml")
    assert "gpuwarden.io/checkpoint-done" in pod.metadata.annotations


def test_direct_access_fills_metadata(sim: KubeSim) -> None:
    created = sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    meta = created["metadata"]
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert int(meta["resourceVersion"]) > 0
    assert meta["creationTimestamp"] == rfc3339(sim.clock.now())
    patched = sim.patch_direct("Node", "gpu-a", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert patched["status"]["conditions"] == [{"type": "Ready", "status": "False"}]  # merge patch: replaced
    assert sim.get("Node", "missing") is None
    sim.delete_direct("Node", "gpu-a")
    assert sim.list("Node") == []


def test_clock_speed_and_advance() -> None:
    clock = SimClock(speed=0)
    start = clock.now()
    assert start.tzinfo is not None
    clock.advance(120)
    assert (clock.now() - start).total_seconds() == 120
    fast = SimClock(speed=1000)
    t0 = fast.now()
    KubeSim(clock=fast).wait_until(lambda: (fast.now() - t0).total_seconds() > 50, timeout=1)
    assert (fast.now() - t0).total_seconds() > 50


def test_gpu_cluster_is_coherent(sim: KubeSim) -> None:
    summary = b.gpu_cluster(sim, nodes=4)
    assert len(summary.nodes) == 4
    for name in summary.nodes:
        node = sim.get("Node", name)
        assert node is not None
        assert re.fullmatch(r"aws:///us-west-2[ab]/i-[0-9a-f]{17}", node["spec"]["providerID"])
        assert node["spec"]["providerID"].endswith(summary.instance_ids[name])
        labels = node["metadata"]["labels"]
        assert labels["karpenter.sh/nodepool"] == "gpu-training"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        on_node = sim.list("Pod", field_selector=f"spec.nodeName={name}")
        assert any(p["metadata"]["namespace"] == "kube-system" for p in on_node)  # device plugin
    claims = sim.list("NodeClaim")
    assert sorted(c["status"]["nodeName"] for c in claims) == sorted(summary.nodes)
    assert len(summary.training_pods) == 3
    pdb = sim.get("PodDisruptionBudget", "inference", "serving")
    assert pdb is not None
    assert pdb["status"]["disruptionsAllowed"] == 1
    assert pdb["status"]["expectedPods"] == 3
    for ref in summary.daemonset_pods + summary.training_pods + summary.inference_pods:
        ns, name = ref.split("/")
        pod = sim.get("Pod", name, ns)
        assert pod is not None
        owner = pod["metadata"]["ownerReferences"][0]
        assert sim.get(owner["kind"], owner["name"], ns) is not None  # owners exist (kubectl drain looks)
