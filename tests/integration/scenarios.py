"""Clusters the integration tests start from (built with the simulator's builders)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpuwarden.kinds.registry import POLICY
from sim import KubeSim
from sim.builders import daemonset_pod, gpu_node, inference_pod, job, mirror_pod, nodepool, pdb, training_pod

NODE = "ip-10-0-1-23.us-west-2.compute.internal"
INSTANCE = "i-0abc1234def567890"


@dataclass
class Scenario:
    node: str = NODE
    instance_id: str = INSTANCE
    trainers: dict[str, str] = field(default_factory=dict)  # mode -> "ns/name"
    daemonset_pod: str = ""
    mirror_pod: str = ""
    inference: list[str] = field(default_factory=list)


def spot_node(
    sim: KubeSim,
    *,
    modes: tuple[str, ...] = ("signal:SIGUSR1", "exec:/bin/checkpoint --now", "annotate"),
    http_port: int | None = None,
    pdb_min_available: int | str | None = 1,
    inference: int = 2,
    grace: int = 30,
    nodepool_name: str | None = "gpu-training",
) -> Scenario:
    """One Spot GPU node (the samples' instance) with a trainer per checkpoint mode, a DaemonSet
    pod, a mirror pod and inference replicas behind a PDB; a second node holds other replicas."""
    if nodepool_name:
        sim.create(nodepool(nodepool_name))
    node = sim.create(gpu_node(NODE, INSTANCE, nodepool=nodepool_name, ip="10.0.1.23"))
    other = sim.create(
        gpu_node("ip-10-0-2-40.us-west-2.compute.internal", "i-0fedcba9876543210", nodepool=nodepool_name)
    )
    out = Scenario()
    all_modes = modes + ((f"http:{http_port}/checkpoint",) if http_port else ())
    for i, mode in enumerate(all_modes):
        owner = sim.create(job(f"train-{i}", "ml"))
        obj = sim.create(training_pod(f"train-{i}-worker", node, gpus=2, checkpoint=mode, owner=owner, grace=grace))
        key = f"ml/{obj['metadata']['name']}"
        out.trainers[mode.split(":")[0]] = key
        if mode.startswith("http:"):
            sim.patch_direct("Pod", obj["metadata"]["name"], {"status": {"podIP": "127.0.0.1"}}, "ml")
    ds = sim.create(daemonset_pod(node))
    out.daemonset_pod = f"kube-system/{ds['metadata']['name']}"
    mirror = sim.create(mirror_pod("kube-proxy", node))
    out.mirror_pod = f"kube-system/{mirror['metadata']['name']}"
    labels = {"app": "inference"}
    for i in range(inference):
        here = sim.create(inference_pod(f"inference-{i}", node, labels=labels, grace=grace))
        out.inference.append(f"serving/{here['metadata']['name']}")
        sim.create(inference_pod(f"inference-other-{i}", other, labels=labels, grace=grace))
    if pdb_min_available is not None:
        sim.create(pdb("inference", "serving", labels, min_available=pdb_min_available))
    return out


@dataclass
class CheckpointServer:
    port: int
    posts: list[str]


@contextmanager
def checkpoint_server(status: int = 200) -> Iterator[CheckpointServer]:
    """A workload's checkpoint endpoint on 127.0.0.1 (the `http:` mode's pod IP in tests)."""
    posts: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield CheckpointServer(port=server.server_address[1], posts=posts)
    finally:
        server.shutdown()
        server.server_close()


#: the Capacity Block the tests' reserved nodes belong to, and the policy that plans its drain
BLOCK = "cr-0a1b2c3d4e5f67890"
BLOCKS_POLICY = POLICY.model_validate({"cluster": "ml-prod", "capacity_blocks": {"lead_minutes": 20}})
#: the two p5 nodes of the Capacity Block `block_cluster` makes, and their instances
NODES = ("ip-10-0-3-10.us-west-2.compute.internal", "ip-10-0-3-11.us-west-2.compute.internal")
INSTANCES = ("i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2")


def block_cluster(sim: KubeSim, *, labelled: bool = True) -> list[str]:
    """Two p5 nodes in the Capacity Block, each with a checkpointing trainer: launched by Karpenter
    (labelled with the reservation), or members of a node group (only EC2 knows the reservation)."""
    sim.create(nodepool("gpu-training"))
    trainers = []
    for node_name, instance, mode in zip(NODES, INSTANCES, ("signal:SIGUSR1", "annotate"), strict=True):
        body = gpu_node(
            node_name,
            instance,
            instance_type="p5.48xlarge",
            capacity_type="reserved",
            nodepool="gpu-training" if labelled else None,
        )
        if labelled:
            body["metadata"]["labels"] |= {
                "karpenter.k8s.aws/capacity-reservation-id": BLOCK,
                "karpenter.k8s.aws/capacity-reservation-type": "capacity-block",
            }
        node = sim.create(body)
        owner = sim.create(job(f"llm-{instance[-1]}", "ml"))
        pod = sim.create(training_pod(f"llm-{instance[-1]}-worker", node, checkpoint=mode, owner=owner, grace=10))
        trainers.append(f"ml/{pod['metadata']['name']}")
    return trainers


#: an EBS volume's zone, as the EBS CSI driver labels it
ZONE_KEY = "topology.ebs.csi.aws.com/zone"


def ebs_volume(name: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "500Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "gp3",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0", "fsType": "ext4"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": [zone]}]}]
                }
            },
            "claimRef": {"namespace": "ml", "name": "ckpt-train-0"},
        },
        "status": {"phase": "Bound"},
    }


def claim(name: str, volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "gp3",
            "resources": {"requests": {"storage": "500Gi"}},
            "volumeName": volume,
        },
        "status": {"phase": "Bound"},
    }


def requirement(claim: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A NodeClaim's requirements on ``key``."""
    return [r for r in claim["spec"]["requirements"] if r["key"] == key]
