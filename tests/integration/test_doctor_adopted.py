"""`gpuwarden doctor` on clusters as teams run them: Prometheus-first (gpu-idle fed by an Alertmanager
alert; dcgm-exporter's Hostname label) and EKS Auto Mode (docs/gpu-signals.md, docs/cluster.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim import KubeSim
from sim import builders as b
from tests.integration.doctor_cli import by_check, doctor, healthy_cluster, put_gpu_metric

ALERTS_POLICY = """
cluster: ml-prod
alerts:
  LowGPUUtilization: gpu-idle
  GPUXidError: gpu-unhealthy
"""


def dcgm_exporter(*, env: list[dict[str, Any]] | None = None, host_network: bool = False) -> dict[str, Any]:
    """dcgm-exporter's DaemonSet as its manifests render it (NVIDIA/dcgm-exporter dcgm-exporter.yaml)."""
    labels = {"app.kubernetes.io/name": "dcgm-exporter"}
    container = {
        "name": "dcgm-exporter",
        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
        "env": [{"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"}, *(env or [])],
    }
    spec: dict[str, Any] = {"containers": [container]}
    if host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "namespace": "monitoring", "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


NODE_NAME_FROM_SPEC = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def test_gpu_idle_fed_by_an_alertmanager_alert_needs_no_cloudwatch_metric(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    # Given no node_gpu_utilization for the cluster in CloudWatch, but gpu-idle mapped from an alert
    healthy_cluster(sim)
    put_gpu_metric("another-cluster")
    # When the doctor runs with that policy
    _, report = doctor(sim, tmp_path, ALERTS_POLICY)
    # Then gpu-metrics does not warn about CloudWatch, and names the alert that feeds gpu-idle
    metrics = by_check(report)["gpu-metrics"]
    assert metrics["severity"] == "ok", metrics
    assert "LowGPUUtilization" in metrics["message"]


def test_a_dcgm_exporter_whose_hostname_is_its_pod_name_is_a_warning(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given alerts mapped and a dcgm-exporter with neither NODE_NAME nor host networking
    healthy_cluster(sim)
    sim.create(dcgm_exporter())
    # When the doctor runs
    _, report = doctor(sim, tmp_path, ALERTS_POLICY)
    # Then alert-node-labels warns: every alert would read as not a node of the cluster
    finding = by_check(report)["alert-node-labels"]
    assert finding["severity"] == "warn", finding
    assert "monitoring/dcgm-exporter" in finding["message"]
    assert "pod's own name" in finding["message"]
    assert "NODE_NAME" in finding["fix"]


def test_a_dcgm_exporter_with_node_name_or_host_network_is_ok(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    sim.create(dcgm_exporter(env=[NODE_NAME_FROM_SPEC]))
    _, report = doctor(sim, tmp_path, ALERTS_POLICY)
    assert by_check(report)["alert-node-labels"]["severity"] == "ok"
    assert "env NODE_NAME" in by_check(report)["alert-node-labels"]["message"]
    sim.delete_direct("DaemonSet", "dcgm-exporter", "monitoring")
    sim.create(dcgm_exporter(host_network=True))
    _, report = doctor(sim, tmp_path, ALERTS_POLICY)
    assert by_check(report)["alert-node-labels"]["severity"] == "ok"


def test_a_remote_host_engine_names_its_host_not_the_node(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # GPU Operator style: the exporter talks to nv-hostengine on the node's IP; Hostname is that host
    healthy_cluster(sim)
    remote = {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "$(NODE_IP):5555"}
    sim.create(dcgm_exporter(env=[NODE_NAME_FROM_SPEC, remote]))
    _, report = doctor(sim, tmp_path, ALERTS_POLICY)
    assert by_check(report)["alert-node-labels"]["severity"] == "warn"
    assert "remote host engine" in by_check(report)["alert-node-labels"]["message"]


def test_nodes_of_eks_auto_mode_are_named_with_what_gpuwarden_does(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given an Auto Mode GPU node (no Karpenter Deployment in the cluster: AWS runs it)
    sim.create(b.auto_mode_nodepool("gpu-auto"))
    node = sim.create(b.auto_mode_gpu_node("i-0abc1234def567891", nodepool="gpu-auto"))
    sim.create(b.nodeclaim_for(node))
    put_gpu_metric()
    # When the doctor runs
    _, report = doctor(sim, tmp_path)
    # Then eks-auto-mode names the node, its pool and its NodeClaim on the eks.amazonaws.com NodeClass
    finding = by_check(report)["eks-auto-mode"]
    assert finding["severity"] == "ok"
    assert "1 node of EKS Auto Mode" in finding["message"]
    assert "gpu-auto" in finding["message"]
    assert "1 NodeClaim on" in finding["message"]
    assert by_check(report)["karpenter-interruption-queue"]["severity"] == "ok"


def test_no_auto_mode_node_is_said(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    put_gpu_metric()
    _, report = doctor(sim, tmp_path)
    assert by_check(report)["eks-auto-mode"]["message"].startswith("no node of EKS Auto Mode")
