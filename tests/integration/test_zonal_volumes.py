"""Zonal volumes and DRA claims keep the replacement (docs/cluster.md, "Volumes"): a Spot warning for
a node whose trainer's checkpoint PersistentVolumeClaim is bound to a zonal EBS volume launches its
replacement NodeClaim in that volume's zone, read through the PVC / PV ports (the real client over
HTTP against the simulator). The PV is shaped as the EBS CSI driver provisions it (required node
affinity on ``topology.ebs.csi.aws.com/zone``)."""

from __future__ import annotations

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.builders import gpu_node, job, nodepool, training_pod
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import INSTANCE, NODE, claim, ebs_volume


def test_a_spot_replacement_stays_in_the_zone_of_the_trainers_ebs_volume(world: World) -> None:
    # Given a Spot node in us-west-2a (its pool spans three zones) whose trainer mounts a checkpoint
    # PVC bound to an EBS volume in us-west-2b (restored from a snapshot there)
    sim = world.sim
    sim.create(nodepool("gpu-training"))
    node = sim.create(gpu_node(NODE, INSTANCE, zone="us-west-2a", nodepool="gpu-training", ip="10.0.1.23"))
    sim.create(ebs_volume("pv-ckpt-0", "us-west-2b"))
    sim.create(claim("ckpt-train-0", "pv-ckpt-0"))
    trainer = training_pod("train-0", node, checkpoint=None, owner=sim.create(job("train", "ml")))
    trainer["spec"]["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-train-0"}}]
    sim.create(trainer)

    # When the Spot warning arrives
    event = load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))
    result = handle_batch(parse_notices(event), world.deps()).to_json()

    # Then the replacement NodeClaim is pinned to the volume's zone
    assert result["outcome"] == "handled", result["reason"]
    replacement = world.node(NODE)["metadata"]["annotations"]["gpuwarden.io/replacement"]
    made = sim.get("NodeClaim", replacement.split("/", 1)[1])
    assert made is not None
    zones = [r for r in made["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"]
    assert zones
    assert all(r["operator"] != "In" or r["values"] == ["us-west-2b"] for r in zones), zones
    assert any(r["operator"] == "In" and r["values"] == ["us-west-2b"] for r in zones), zones
    # and the volumes were read through the ports: the namespace's PVCs, the one PV
    reads = {(r.method, r.path) for r in sim.requests}
    assert ("GET", "/api/v1/namespaces/ml/persistentvolumeclaims") in reads
    assert ("GET", "/api/v1/persistentvolumes/pv-ckpt-0") in reads


def test_a_trainium_replacement_requests_every_neuron_device_and_efa_interface_in_the_volumes_zone(
    world: World,
) -> None:
    # Given the sandbox's Trainium pool: a trn1.32xlarge node whose Neuron trainers ask for 12 + 4
    # Neuron devices and 6 + 2 EFA interfaces, one with a zonal EBS checkpoint volume in us-west-2a
    from sim.scenes.base import TRAINIUM_INSTANCE, TRAINIUM_NODE, build_trainium

    build_trainium(world.sim)
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    event["detail"]["instance-id"] = TRAINIUM_INSTANCE
    event["resources"] = [f"arn:aws:ec2:us-west-2a:instance/{TRAINIUM_INSTANCE}"]

    # When a warning that the node is about to be lost arrives
    result = handle_batch(parse_notices(event), world.deps()).to_json()

    # Then its replacement asks Karpenter for every Neuron device and EFA interface, in the volume's zone
    assert result["outcome"] == "handled", result["reason"]
    replaced = [a for a in result["actions"] if a["type"].startswith("replacement")]
    assert [a["type"] for a in replaced] == ["replacement"], replaced
    replacement = world.node(TRAINIUM_NODE)["metadata"]["annotations"]["gpuwarden.io/replacement"]
    made = world.sim.get("NodeClaim", replacement.split("/", 1)[1])
    assert made is not None
    requests = made["spec"]["resources"]["requests"]
    assert requests["aws.amazon.com/neuron"] == "16", requests
    assert requests["vpc.amazonaws.com/efa"] == "8", requests
    assert "nvidia.com/gpu" not in requests
    zones = [r for r in made["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"]
    assert any(r["operator"] == "In" and r["values"] == ["us-west-2a"] for r in zones), zones
