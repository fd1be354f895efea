"""doctor's `gpu-health` check (docs/gpu-signals.md), on the simulator."""

from __future__ import annotations

from pathlib import Path

from sim import KubeSim
from sim import builders as b
from sim.actors.karpenter import karpenter_deployment
from tests.integration.doctor_cli import POLICY, by_check, doctor, healthy_cluster, put_gpu_metric

#: Karpenter's chart renders its feature gates into this env var (settings.featureGates)
GATES = "ReservedCapacity=true,SpotToSpotConsolidation=false,NodeRepair={},NodeOverlay=false"


def test_gpu_nodes_that_report_no_gpu_health_are_a_warning(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given a GPU node with neither the EKS node monitoring agent's condition nor NVSentinel's
    sim.create(b.nodepool("gpu-training"))
    sim.create(b.gpu_node("ip-10-0-1-23.us-west-2.compute.internal", "i-0abc1234def567890"))
    put_gpu_metric()

    _, report = doctor(sim, tmp_path)

    finding = by_check(report)["gpu-health"]
    assert finding["severity"] == "warn"
    assert "reports AcceleratedHardwareReady or GPUHealthy" in finding["message"]
    assert "eks-node-monitoring-agent" in finding["fix"]


def test_node_repair_on_while_the_scan_is_off_is_a_warning(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given Karpenter with its NodeRepair gate on, and a policy that switches gpuwarden's scan off
    healthy_cluster(sim)
    put_gpu_metric()
    deployment = karpenter_deployment(queue=None, namespace="karpenter")
    deployment["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "FEATURE_GATES", "value": GATES.format("true")}
    )
    sim.create(deployment)

    _, report = doctor(sim, tmp_path, POLICY + "gpu_health:\n  enabled: false\n")

    finding = by_check(report)["gpu-health"]
    assert finding["severity"] == "warn"
    assert "NodeRepair gate is on (karpenter/karpenter)" in finding["message"]


def test_a_selector_that_misses_the_reporting_nodes_is_a_warning(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    put_gpu_metric()

    _, report = doctor(sim, tmp_path, POLICY + "gpu_health:\n  node_selector: karpenter.k8s.aws/instance-gpu-count\n")

    finding = by_check(report)["gpu-health"]
    assert finding["severity"] == "warn"
    assert "matches none of the 1 node that reports" in finding["message"]
