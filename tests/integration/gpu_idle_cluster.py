"""The GPU-idle tests' cluster and signals: an idle node in a Karpenter NodePool, its utilisation
series in CloudWatch (moto), the alarm's contributor event, and what an untouched node looks like."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch
from sim import KubeSim
from sim.builders import daemonset_pod, gpu_node, inference_pod, nodeclaim_for, nodepool, pdb, training_pod
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import INSTANCE, NODE  # the samples' node and instance

CLUSTER = "ml-prod"
TAINT = {"key": "gpuwarden.io/disruption", "value": "gpu-idle", "effect": "NoSchedule"}
OURS = ("gpuwarden.io/event-id", "gpuwarden.io/kind", "gpuwarden.io/cordoned", "gpuwarden.io/claimed-at")


def put_utilization(
    instance_id: str,
    node: str,
    values: list[float],
    step_minutes: int = 5,
    *,
    namespace: str = "ContainerInsights",
    metric: str = "node_gpu_utilization",
) -> None:
    """A GPU utilisation series for the node (default: Container Insights'), newest last, ending a minute ago."""
    now = datetime.now(UTC)
    dims = [
        {"Name": "ClusterName", "Value": CLUSTER},
        {"Name": "InstanceId", "Value": instance_id},
        {"Name": "NodeName", "Value": node},
    ]
    data = [
        {
            "MetricName": metric,
            "Dimensions": dims,
            "Timestamp": now - timedelta(minutes=1 + step_minutes * (len(values) - 1 - i)),
            "Value": value,
            "Unit": "Percent",
        }
        for i, value in enumerate(values)
    ]
    boto3.client("cloudwatch", region_name="us-west-2").put_metric_data(Namespace=namespace, MetricData=data)


IDLE = [0.0, 1.5, 0.0, 2.0, 0.0, 0.0]


@dataclass
class IdleCluster:
    nodes: list[str] = field(default_factory=list)
    instances: dict[str, str] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)  # node -> NodeClaim
    pods: dict[str, list[str]] = field(default_factory=dict)  # node -> "ns/name" that must go


def idle_cluster(
    sim: KubeSim,
    extra_nodes: int = 1,
    *,
    trainer: bool = True,
    guarded: bool = False,
    pool: str = "gpu-inference",
    inference: bool = True,
    node_name: str = NODE,
    gpus: int = 8,
) -> IdleCluster:
    """The samples' node (idle: a finished-work trainer that checkpoints on request, an idle
    inference replica) in a Karpenter NodePool, with ``extra_nodes`` more nodes in the pool.
    ``node_name`` / ``gpus``: that node's name and GPU count (the others have 8)."""
    out = IdleCluster()
    sim.create(nodepool(pool))
    names = [(node_name, INSTANCE)] + [
        (f"ip-10-0-7-{i}.us-west-2.compute.internal", f"i-0{hashlib.sha256(str(i).encode()).hexdigest()[:16]}")
        for i in range(extra_nodes)
    ]
    for name, instance in names:
        node = sim.create(gpu_node(name, instance, nodepool=pool, gpus=gpus if name == node_name else 8))
        claim = sim.create(nodeclaim_for(node))
        sim.create(daemonset_pod(node))
        out.nodes.append(name)
        out.instances[name] = instance
        out.claims[name] = claim["metadata"]["name"]
        out.pods[name] = []
    if trainer:
        # 7 GPUs: with the replica's one the node's 8 (a pod that would come back fits elsewhere)
        sim.create(training_pod("notebook-0", node_name, gpus=7, checkpoint="annotate", namespace="research"))
        out.pods[node_name].append("research/notebook-0")
    labels = {"app": "idle-inference"}
    if inference:
        sim.create(inference_pod("idle-inference-0", node_name, labels=labels, grace=5))
        out.pods[node_name].append("serving/idle-inference-0")
    if guarded:
        sim.create(pdb("idle-inference", "serving", labels, min_available="100%"))
    return out


def contributor_event(node: str, instance: str, **overrides: Any) -> dict[str, Any]:
    event = load_event("cloudwatch-alarm-contributor-state-change.json")
    event["detail"]["alarmContributor"]["attributes"] = {"InstanceId": instance, "NodeName": node}
    event.update(overrides)
    return event


def run(world: World, event: dict[str, Any], policy: Policy | None = None) -> dict[str, Any]:
    return handle_batch(parse_notices(event), world.deps(policy)).to_json()


def node_events(world: World, node: str) -> list[dict[str, Any]]:
    return [e for e in world.sim.list("Event", "default") if e["involvedObject"]["name"] == node]


def policy(**gpu_idle: Any) -> Policy:
    return POLICY.model_validate({"cluster": CLUSTER, "gpu_idle": gpu_idle})


def assert_untouched(world: World, name: str) -> None:
    node = world.node(name)
    assert not node["spec"].get("unschedulable")
    assert TAINT not in node["spec"].get("taints", [])
    assert not set(OURS) & set(node["metadata"].get("annotations") or {})
