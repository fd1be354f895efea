"""What every demo scene shares: the sample events, the demo cluster, simulated AWS, the
summary row and the timeline line. Scenes import this module, never `sim.demo` (which lists them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the timeline's renderer is the command line's (`gpuwarden invoke` at a terminal prints it too)
from gpuwarden.terminal import TIMELINE_LABELS as TIMELINE_LABELS
from gpuwarden.terminal import timeline_line as timeline_line
from sim.apiserver.core import KubeSim
from sim.builders import (
    daemonset_pod,
    gpu_node,
    inference_pod,
    job,
    mirror_pod,
    nodepool,
    pdb,
    pod,
    training_pod,
    trainium_node,
)
from sim.wiring import sim_deps

EVENTS = Path(__file__).resolve().parents[2] / "events"
NODE = "ip-10-0-1-23.us-west-2.compute.internal"
INSTANCE = "i-0abc1234def567890"


@dataclass
class SceneSummary:
    scene: str
    outcome: str
    nodes: int
    #: pods that checkpointed for the scene's notice (acknowledged), of ``asked`` asked by it
    checkpointed: int
    evicted: int
    seconds_left: float | None
    asked: int = 0

    @classmethod
    def of(cls, scene: str, result: dict[str, Any], *, evicted: int | None = None) -> SceneSummary:
        """One node's scene from gpuwarden's answer: the pods it evicted once they had checkpointed,
        every pod it evicted or deleted (``evicted``: counted by the scene itself), the time left."""
        actions = result["actions"]
        asked, checkpointed = checkpoint_counts(result)
        return cls(
            scene=scene,
            outcome=result["outcome"],
            nodes=1,
            checkpointed=checkpointed,
            evicted=sum(1 for a in actions if a["type"] in ("evict", "delete")) if evicted is None else evicted,
            seconds_left=result.get("seconds_left"),
            asked=asked,
        )


def checkpoint_counts(result: dict[str, Any]) -> tuple[int, int]:
    """The pods gpuwarden asked to checkpoint in ``result`` (a gang's ranks on other nodes too), and
    those that acknowledged: a gang's ``acknowledged`` and every pod evicted on its acknowledgement."""
    actions = result["actions"]
    asked = {a.get("pod") for a in actions if a["type"] == "checkpoint-requested"}
    acked = {p for gang in result.get("checkpoints") or () for p in gang.get("acknowledged", ())}
    acked |= {a.get("pod") for a in actions if a["type"] == "evict" and a.get("reason") == "checkpoint acknowledged"}
    return len(asked), len(acked)


def build_cluster(sim: KubeSim) -> None:
    sim.create(nodepool("gpu-training"))
    node = sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    other = sim.create(gpu_node("ip-10-0-2-40.us-west-2.compute.internal", "i-0fedcba9876543210", zone="us-west-2b"))
    modes = ["signal:SIGUSR1", "annotate", "exec:python /app/checkpoint.py --fast"]
    for i, mode in enumerate(modes):
        owner = sim.create(job(f"llama-ft-{i}", "ml"))
        sim.create(training_pod(f"llama-ft-{i}-worker", node, gpus=2, checkpoint=mode, owner=owner, grace=20))
    for n in (node, other):
        sim.create(daemonset_pod(n))
    sim.create(mirror_pod("kube-proxy", node))
    labels = {"app": "inference"}
    for i in range(2):
        sim.create(inference_pod(f"triton-{i}", node, labels=labels, grace=15))
        sim.create(inference_pod(f"triton-b{i}", other, labels=labels, grace=15))
    sim.create(pdb("inference", "serving", labels, min_available=3))


TRAINIUM_NODE = "ip-10-0-3-50.us-west-2.compute.internal"
TRAINIUM_INSTANCE = "i-0c0ffee0123456789"


def build_trainium(sim: KubeSim) -> None:
    """The sandbox's Trainium pool: a trn1.32xlarge node (16 Neuron devices, 8 EFA) running a
    Neuron trainer that asks for every device and interface, and a rank whose checkpoint volume is
    a zonal EBS volume in the node's zone (docs/cluster.md, "Volumes")."""
    pool = nodepool("trn-training", instance_types=("trn1.32xlarge",), capacity_types=("on-demand",), gpu_limit=None)
    pool["spec"]["template"]["spec"]["taints"] = [
        {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"}
    ]
    sim.create(pool)
    node = sim.create(trainium_node(TRAINIUM_NODE, TRAINIUM_INSTANCE, zone="us-west-2a"))
    sim.create(daemonset_pod(node))
    toleration = [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}]
    devices = {"aws.amazon.com/neuron": "12", "vpc.amazonaws.com/efa": "6"}
    image = "public.ecr.aws/neuron/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04"
    owner = sim.create(job("neuron-ft", "ml"))
    ask = {"gpuwarden.io/checkpoint": "annotate"}
    trainer = [{"name": "trainer", "image": image, "resources": {"requests": devices, "limits": devices}}]
    sim.create(pod("neuron-ft-0", node, "ml", owner=owner, annotations=ask, containers=trainer, tolerations=toleration))
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv-neuron-ckpt"},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp3",
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0a1b2c3d4e5f60718"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-west-2a"]}
                                ]
                            }
                        ]
                    }
                },
            },
            "status": {"phase": "Bound"},
        }
    )
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "neuron-ckpt", "namespace": "ml"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp3",
                "resources": {"requests": {"storage": "1Ti"}},
                "volumeName": "pv-neuron-ckpt",
            },
            "status": {"phase": "Bound"},
        }
    )
    small = {"aws.amazon.com/neuron": "4", "vpc.amazonaws.com/efa": "2"}
    ranked = [{"name": "trainer", "image": image, "resources": {"requests": small, "limits": small}}]
    volume = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "neuron-ckpt"}}]
    sim.create(
        pod(
            "neuron-ft-1",
            node,
            "ml",
            owner=owner,
            annotations=ask,
            containers=ranked,
            tolerations=toleration,
            volumes=volume,
        )
    )


@contextmanager
def simulated_aws() -> Iterator[None]:
    from moto import mock_aws

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="demo", AWS_SECRET_ACCESS_KEY="demo", AWS_DEFAULT_REGION="us-west-2")  # noqa: S106
    try:
        with mock_aws():
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def scene_deps(sim: KubeSim) -> Any:
    return sim_deps(sim, caller="demo")
