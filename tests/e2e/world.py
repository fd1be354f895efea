"""What the e2e scenes share: moto for AWS, `gpuwarden invoke` against the plane, waiting on the
real cluster's objects, and reading the API server's audit log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from realplane.harness import Plane

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
EVENTS = Path(__file__).resolve().parents[2] / "events"
REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
CLUSTER = "ml-prod"
#: The client name gpuwarden's requests carry in the audit log (Plane.kubeconfig_for).
GPUWARDEN_USER = "gpuwarden"
NODEPOOL = "gpu-training"
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


@dataclass
class AwsWorld:
    """moto, in this process, as the EC2 the plane's nodes would run in."""

    endpoint: str

    def ec2(self) -> Any:
        import boto3

        return boto3.client(
            "ec2",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def instance_for_node(self, node: dict[str, Any]) -> str:
        """Launch the EC2 instance behind a KWOK node and return its id.

        Karpenter's KWOK provider names a node ``kwok-<nodeclaim>-…`` with providerID
        ``kwok://<name>``, so nothing in the node says which instance it is; gpuwarden finds a
        node without an AWS providerID by the instance's ``PrivateDnsName`` (as EKS names nodes).
        moto derives that name from the private IP; this instance reports the node's name instead,
        as EC2 would for the node's real instance (docs/realplane.md, "Findings")."""
        from moto.backends import get_backend

        labels = node["metadata"]["labels"]
        ec2 = self.ec2()
        image = ec2.describe_images()["Images"][0]["ImageId"]
        launched = ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType=labels.get("node.kubernetes.io/instance-type", "p4d.24xlarge"),
            Placement={"AvailabilityZone": labels.get("topology.kubernetes.io/zone", f"{REGION}a")},
        )
        instance_id: str = launched["Instances"][0]["InstanceId"]
        instance = get_backend("ec2")[ACCOUNT][REGION].get_instance(instance_id)
        name = node["metadata"]["name"]
        instance.__class__ = type(
            "KwokNodeInstance", (type(instance),), {"private_dns_name": property(lambda _self: name)}
        )
        return instance_id


@contextmanager
def start_moto() -> Iterator[AwsWorld]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield AwsWorld(endpoint=f"http://127.0.0.1:{server.get_host_and_port()[1]}")
    finally:
        server.stop()


def spot_warning(instance_id: str, at: datetime | None = None) -> dict[str, Any]:
    """The sample Spot warning (events/spot-interruption.json) for ``instance_id``, stamped ``at``."""
    event: dict[str, Any] = json.loads((EVENTS / "spot-interruption.json").read_text())
    when = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    zone_arn = event["resources"][0].rsplit("/", 1)[0]
    event.update(time=when, resources=[f"{zone_arn}/{instance_id}"])
    event["detail"]["instance-id"] = instance_id
    return event


def invoke(plane: Plane, aws: AwsWorld, event: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
    """`gpuwarden invoke EVENT.json` as a user runs it: the console script, KUBECONFIG at the plane
    (as client ``gpuwarden``), AWS at moto."""
    path = tmp / "event.json"
    path.write_text(json.dumps(event))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "DRY_RUN", "KUBECONFIG"))}
    env |= {
        "KUBECONFIG": str(plane.kubeconfig_for(GPUWARDEN_USER)),
        "AWS_ENDPOINT_URL": aws.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "GPUWARDEN_CLUSTER": CLUSTER,
        "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenE2E",
    }
    return subprocess.run(
        [str(GPUWARDEN), "--verbose", "invoke", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


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


class SignalAcknowledger:
    """The trainer side of a `signal:` checkpoint on the real plane: KWOK runs gpuwarden's
    `kill -s USR1 1` through the harness's recording `kill` (plane.signals); when a new line
    appears there, this writes `gpuwarden.io/checkpoint-done` on the pod that was asked and has
    not answered, as a trainer's signal handler would once its checkpoint is saved."""

    def __init__(self, plane: Plane, namespace: str, selector: str) -> None:
        self.plane = plane
        self.namespace = namespace
        self.selector = selector
        self.acknowledged: list[tuple[str, str]] = []  # (pod, the signal line it answered)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="signal-acknowledger", daemon=True)

    def __enter__(self) -> SignalAcknowledger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from gpuwarden.domain import annotations as ann

        core: Any = client.CoreV1Api(self.plane.api_client())
        seen = 0
        while not self._stop.wait(0.05):
            lines = self.plane.signals.read_text().splitlines()
            for line in lines[seen:]:
                for pod in core.list_namespaced_pod(self.namespace, label_selector=self.selector).items:
                    notes = pod.metadata.annotations or {}
                    if notes.get(ann.CHECKPOINT_REQUESTED) and not notes.get(ann.CHECKPOINT_DONE):
                        done = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                        body = {"metadata": {"annotations": {ann.CHECKPOINT_DONE: done}}}
                        core.patch_namespaced_pod(pod.metadata.name, self.namespace, body)
                        self.acknowledged.append((pod.metadata.name, line))
            seen = len(lines)
