"""A replacement sized as Karpenter sizes one and one of its pool's nodes (docs/cluster.md, "What a
replacement requests"), through the real services and the real client over HTTP against the
simulator: the claim asks for the moved pods' cpu, memory and devices plus the DaemonSet pods that
will run there (read through the DaemonSet port), carries the NodePool's owner reference and hash,
and a node's own mirror pod blocks nothing (issue 41, finding 3)."""

from __future__ import annotations

from typing import Any

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.builders import gpu_node, job, mirror_pod, nodepool, training_pod
from sim.builders.owners import daemonset
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import INSTANCE, NODE

GPU = "nvidia.com/gpu"
#: What Karpenter's hash controller writes on a NodePool (the simulator's Karpenter does not hash).
HASH = {"karpenter.sh/nodepool-hash": "6849386175284186929", "karpenter.sh/nodepool-hash-version": "v3"}


def warning(world: World, instance: str = INSTANCE) -> dict[str, Any]:
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    event["detail"]["instance-id"] = instance
    event["resources"] = [f"arn:aws:ec2:us-west-2a:instance/{instance}"]
    return event


def launched(world: World, node: str) -> dict[str, Any]:
    record = world.node(node)["metadata"]["annotations"]["gpuwarden.io/replacement"]
    made = world.sim.get("NodeClaim", record.split("/", 1)[1])
    assert made is not None
    return made


def with_requests(pod: dict[str, Any], **requests: str) -> dict[str, Any]:
    pod["spec"]["containers"][0]["resources"] = {"requests": dict(requests), "limits": {GPU: requests[GPU]}}
    return pod


def test_the_claim_asks_for_the_pods_and_the_daemonsets_and_is_one_of_its_pools_nodes(world: World) -> None:
    # Given a Spot GPU node whose two trainers ask 16 CPU, 128 GiB and 4 GPUs between them, the
    # NVIDIA device plugin's DaemonSet (tolerates the GPU taint) and a log agent's (does not)
    sim = world.sim
    pool = nodepool("gpu-training")
    pool["metadata"]["annotations"] = dict(HASH)
    pool = sim.create(pool)
    node = sim.create(gpu_node(NODE, INSTANCE, nodepool="gpu-training", ip="10.0.1.23"))
    for i, (cpu, memory, gpus) in enumerate((("6", "48Gi", "1"), ("10", "80Gi", "3"))):
        trainer = training_pod(f"train-{i}", node, gpus=int(gpus), checkpoint=None, owner=sim.create(job(f"t{i}")))
        sim.create(with_requests(trainer, cpu=cpu, memory=memory, **{GPU: gpus}))
    plugin = daemonset("nvidia-device-plugin")
    plugin["spec"]["template"]["spec"] |= {
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "p", "image": "x", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
    }
    sim.create(plugin)
    agent = daemonset("fluent-bit")
    agent["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    sim.create(agent)
    sim.create(mirror_pod("kube-proxy", node))

    # When the Spot warning arrives
    result = handle_batch(parse_notices(warning(world)), world.deps()).to_json()

    # Then the NodeClaim asks for all of it plus the device plugin, not for the log agent
    assert result["outcome"] == "handled", result["reason"]
    made = launched(world, NODE)
    assert made["spec"]["resources"]["requests"] == {
        "cpu": "16100m",
        "memory": "131200Mi",
        GPU: "4",
        "pods": "3",
    }
    # and it is one of the NodePool's nodes: owner reference (with the pool's UID) and hash
    assert made["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": "gpu-training",
            "uid": pool["metadata"]["uid"],
            "blockOwnerDeletion": True,
        }
    ]
    assert {k: made["metadata"]["annotations"].get(k) for k in HASH} == HASH
    # the DaemonSets were read through the port, once
    reads = [(r.method, r.path) for r in sim.requests]
    assert reads.count(("GET", "/apis/apps/v1/daemonsets")) == 1


def test_a_trainium_nodes_own_mirror_pod_does_not_keep_its_replacement_from_launching(world: World) -> None:
    # Given the sandbox's Trainium node, and on it the node's own static pod (a GPU-health monitor
    # started by its kubelet), which does not tolerate the Neuron taint of every Neuron NodePool
    from sim.scenes.base import TRAINIUM_INSTANCE, TRAINIUM_NODE, build_trainium

    build_trainium(world.sim)
    monitor = mirror_pod("gpu-health-monitor", TRAINIUM_NODE)
    monitor["spec"]["tolerations"] = []
    world.sim.create(monitor)

    # When a warning that the node is about to be lost arrives
    result = handle_batch(parse_notices(warning(world, TRAINIUM_INSTANCE)), world.deps()).to_json()

    # Then the replacement is launched for the trainers (the mirror pod never moves)
    replaced = [a for a in result["actions"] if a["type"].startswith("replacement")]
    assert [a["type"] for a in replaced] == ["replacement"], replaced
    made = launched(world, TRAINIUM_NODE)
    assert made["spec"]["resources"]["requests"]["aws.amazon.com/neuron"] == "16"
    assert made["metadata"]["labels"]["karpenter.sh/nodepool"] == "trn-training"
