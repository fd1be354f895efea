"""`gpuwarden doctor` for the tests that run it: a healthy cluster to start from, GPU metrics in
CloudWatch (moto), the policy the checks read, and the command run in-process with its JSON read back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpuwarden.cli import main
from sim import KubeSim
from sim import builders as b
from sim.actors.karpenter import karpenter_deployment
from sim.apiserver.api import STRATEGIC_PATCH as STRATEGIC

POLICY = """
cluster: ml-prod
windows:
  - name: business-hours-freeze
    schedule: "0 9 * * MON-FRI"
    timezone: Asia/Seoul
    duration: 10h
    max_disruptions: 0
  - name: night-cap
    schedule: "0 22 * * *"
    timezone: UTC
    duration: 8h
    max_disruptions: 2
    gpu_limit: 8
    nodepools: [gpu-training]
"""


def put_gpu_metric(cluster: str = "ml-prod") -> None:
    import boto3

    boto3.client("cloudwatch", region_name="us-west-2").put_metric_data(
        Namespace="ContainerInsights",
        MetricData=[
            {
                "MetricName": "node_gpu_utilization",
                "Dimensions": [{"Name": "ClusterName", "Value": cluster}, {"Name": "InstanceId", "Value": "i-1"}],
                "Value": 42.0,
                "Timestamp": datetime.now(UTC) - timedelta(minutes=1),
            }
        ],
    )


def healthy_cluster(sim: KubeSim) -> None:
    """Karpenter without an interruption queue, valid opted-in pods, no termination handler."""
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node("ip-10-0-1-23.us-west-2.compute.internal", "i-0abc1234def567890"))
    sim.create(b.nodeclaim_for(node))
    sim.create(b.training_pod("train-0-worker", node, checkpoint="signal:SIGUSR1", checkpoint_timeout=120))
    sim.create(b.training_pod("train-1-worker", node, checkpoint="annotate", checkpoint_container="trainer"))
    sim.create(b.daemonset_pod(node))
    sim.create(karpenter_deployment(queue=None))
    healthy = json.loads(
        (Path(__file__).resolve().parents[2] / "events/nodes/eks-accelerated-hardware-healthy.json").read_text()
    )
    sim.patch_direct("Node", node["metadata"]["name"], {"status": {"conditions": [healthy]}}, patch_type=STRATEGIC)


def doctor(sim: KubeSim, tmp_path: Path, policy: str = POLICY, *args: str) -> tuple[int, dict[str, Any]]:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy)
    env = {
        "KUBECONFIG": str(sim.kubeconfig_path),
        "GPUWARDEN_POLICY_FILE": str(policy_file),
        "GPUWARDEN_NOW": "2026-11-23T03:00:00Z",  # Monday 12:00 in Seoul
    }
    result = CliRunner().invoke(main, ["doctor", *args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def by_check(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {f["check"]: f for f in report["findings"]}
