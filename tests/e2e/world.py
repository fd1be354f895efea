"""What the e2e scenes share: moto for AWS, `gpuwarden invoke` against the plane, waiting on the
real cluster's objects, and reading the API server's audit log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from realplane.aws import REGION, AwsWorld
from realplane.plane.harness import KWOK_NODE_ANNOTATION, Plane

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
EVENTS = Path(__file__).resolve().parents[2] / "events"
#: Each component's log and the audit log of a run (make test-e2e).
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "realplane"
CLUSTER = "ml-prod"
#: The client name gpuwarden's requests carry in the audit log (Plane.kubeconfig_for).
GPUWARDEN_USER = "gpuwarden"
NODEPOOL = "gpu-training"
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def kwok_node(name: str, *, gpu_taint: bool = True) -> dict[str, Any]:
    """A node made by hand for KWOK (the kubelet stand-in; the node is named as such): 8 GPUs, and
    the GPU taint unless ``gpu_taint`` is false (for a manifest that tolerates nothing)."""
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: "8"}
    taints = [{"key": GPU, "value": "true", "effect": "NoSchedule"}] if gpu_taint else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": resources, "allocatable": resources},
    }


def spot_warning(instance_id: str, at: datetime | None = None) -> dict[str, Any]:
    """The sample Spot warning (events/spot-interruption.json) for ``instance_id``, stamped ``at``."""
    event: dict[str, Any] = json.loads((EVENTS / "spot-interruption.json").read_text())
    when = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    zone_arn = event["resources"][0].rsplit("/", 1)[0]
    event.update(time=when, resources=[f"{zone_arn}/{instance_id}"])
    event["detail"]["instance-id"] = instance_id
    return event


def rebalance(instance_id: str) -> dict[str, Any]:
    """An EC2 rebalance recommendation for ``instance_id``, timed now (events/'s sample)."""
    event: dict[str, Any] = json.loads((EVENTS / "rebalance-recommendation.json").read_text())
    zone_arn = event["resources"][0].rsplit("/", 1)[0]
    event.update(time=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), resources=[f"{zone_arn}/{instance_id}"])
    event["detail"]["instance-id"] = instance_id
    return event


def invoke(
    plane: Plane, aws: AwsWorld, event: dict[str, Any], tmp: Path, **options: Any
) -> subprocess.CompletedProcess[str]:
    """`gpuwarden invoke EVENT.json` as a user runs it (see `gpuwarden_cli`)."""
    path = tmp / f"event-{len(list(tmp.glob('event-*.json')))}.json"
    path.write_text(json.dumps(event))
    return gpuwarden_cli(plane, aws, ["invoke", str(path)], **options)


def gpuwarden_cli(
    plane: Plane,
    aws: AwsWorld,
    argv: list[str],
    *,
    policy: Path | None = None,
    now: datetime | None = None,
    save_as: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``gpuwarden ARGV…`` as a user runs it: the console script, KUBECONFIG at the plane (as client
    ``gpuwarden``), AWS at moto, the policy file given (else the cluster name alone) and
    ``GPUWARDEN_NOW`` when a scene sets the windows' clock. ``save_as`` keeps its output in the
    plane's artifacts (``<save_as>.stdout`` / ``.stderr``)."""
    completed = subprocess.run(
        [str(GPUWARDEN), "--verbose", *argv],
        capture_output=True,
        text=True,
        env=gpuwarden_env(plane, aws, policy=policy, now=now),
        timeout=300,
        check=False,
    )
    if save_as:
        (plane.artifacts / f"{save_as}.stdout").write_text(completed.stdout)
        (plane.artifacts / f"{save_as}.stderr").write_text(completed.stderr)
    return completed


def gpuwarden_env(
    plane: Plane, aws: AwsWorld, *, policy: Path | None = None, now: datetime | None = None
) -> dict[str, str]:
    """The environment of a gpuwarden command against the plane and moto (see `gpuwarden_cli`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "DRY_RUN", "KUBECONFIG"))}
    env |= {
        "KUBECONFIG": str(plane.kubeconfig_for(GPUWARDEN_USER)),
        "AWS_ENDPOINT_URL": aws.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenE2E",
    }
    env |= {"GPUWARDEN_POLICY_FILE": str(policy)} if policy else {"GPUWARDEN_CLUSTER": CLUSTER}
    if now is not None:
        env["GPUWARDEN_NOW"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return env


def answer(completed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON answer of a gpuwarden command that exited 0 (else the assertion shows its stderr)."""
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-2000:]
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


class Cluster:
    """The plane's objects through the official client, as dicts (the shapes gpuwarden reads)."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        # Any: the scenes hand the client plain manifests (dicts), as `kubectl apply` would
        self.api: Any = plane.api_client()
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.batch: Any = client.BatchV1Api(self.api)
        self.policy: Any = client.PolicyV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)

    def plain(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return result

    def nodes(self) -> list[dict[str, Any]]:
        return [self.plain(n) for n in self.core.list_node().items]

    def node(self, name: str) -> dict[str, Any]:
        return self.plain(self.core.read_node(name))

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        return [self.plain(p) for p in self.core.list_namespaced_pod(namespace, label_selector=selector).items]

    def namespaces(self) -> set[str]:
        return {n.metadata.name for n in self.core.list_namespace().items}

    def nodeclaims(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")[
            "items"
        ]
        return items

    def namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name}})
        # the ServiceAccount admission plugin refuses pods until the serviceaccount controller
        # has made the namespace's default ServiceAccount
        self.plane.wait_for(
            f"ServiceAccount {name}/default",
            lambda: self.core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        )


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c.get("type") == kind:
            status: str = c.get("status")
            return status
    return None


def running_and_ready(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and condition(pod, "Ready") == "True"


def rfc3339(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# ----------------------------------------------------------------------------- GPU-idle signals


def idle_utilization(aws: AwsWorld, instance_id: str, node: str) -> None:
    """An hour of `node_gpu_utilization` under 10 % for the node, as Container Insights publishes it."""
    import boto3

    cloudwatch = boto3.client(
        "cloudwatch",
        endpoint_url=aws.endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    dims = [
        {"Name": "ClusterName", "Value": CLUSTER},
        {"Name": "InstanceId", "Value": instance_id},
        {"Name": "NodeName", "Value": node},
    ]
    now = datetime.now(UTC)
    data = [
        {"MetricName": "node_gpu_utilization", "Dimensions": dims, "Timestamp": now - timedelta(minutes=m), "Value": v}
        for m, v in zip(range(56, 0, -5), [2.0, 0.0, 0.0, 1.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0], strict=True)
    ]
    cloudwatch.put_metric_data(Namespace="ContainerInsights", MetricData=data)


def contributor_alarm(instance_id: str, node: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "cloudwatch-alarm-contributor-state-change.json").read_text())
    event["time"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event["detail"]["alarmContributor"]["attributes"] = {"InstanceId": instance_id, "NodeName": node}
    return event
