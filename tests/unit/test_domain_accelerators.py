"""Accelerators (domain.accelerators): the node's and the pod's, DRA devices, and what a replacement
requests or keeps of the interrupted node (docs/gpu-signals.md and docs/cluster.md say it for users).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.accelerators import (
    ACCELERATOR_COUNT_LABEL,
    ACCELERATOR_NAME_LABEL,
    ACCELERATOR_TABLE,
    EFA,
    GPU_COUNT_LABEL,
    NEURON,
    NEURONCORE,
    NEURONDEVICE,
    NVIDIA_GPU,
    device_count,
    is_accelerator_node,
    node_accelerator_count,
    pod_accelerators,
    replacement_demand,
    resource_claim_from_json,
)
from gpuwarden.domain.errors import NoFittingReplacement
from gpuwarden.domain.placement import GPU_NAME_LABEL
from gpuwarden.domain.replacement import nodeclaim_manifest
from gpuwarden.domain.views import node_from_json, pod_from_json

DOCS = Path(__file__).resolve().parents[2] / "docs"
ITYPE, ZONE, CAP = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type"


def node_json(
    allocatable: dict[str, str], capacity: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "trn-1",
            "labels": {"karpenter.sh/nodepool": "trainium", ITYPE: "trn1.32xlarge", CAP: "on-demand", **(labels or {})},
        },
        "spec": {"providerID": "aws:///us-west-2b/i-0abc1234def567890"},
        "status": {"allocatable": allocatable, "capacity": capacity or allocatable},
    }


def pod_json(name: str, limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": limits}}],
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
        "status": {"phase": "Running"},
    }


# ------------------------------------------------------------------------------ the node's


def test_a_node_keeps_its_whole_extended_resources_and_nothing_else() -> None:
    view = node_from_json(node_json({"cpu": "128", "memory": "512Gi", NEURON: "16", NEURONCORE: "32", EFA: "8"}))
    assert view.allocatable == {NEURON: 16, NEURONCORE: 32, EFA: 8}


@pytest.mark.parametrize(
    ("allocatable", "count"),
    [
        ({NVIDIA_GPU: 8}, 8),
        ({NVIDIA_GPU: 2, "nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2}, 11),
        ({NEURON: 16, NEURONCORE: 32}, 16),
        ({NEURONDEVICE: 16, NEURONCORE: 32}, 16),
        ({NEURONCORE: 2}, 2),
        ({EFA: 8}, 0),
    ],
    ids=["gpus", "mig-slices-each", "neuron-devices", "neurondevice", "cores-alone", "efa-is-no-accelerator"],
)
def test_a_nodes_accelerator_count(allocatable: dict[str, int], count: int) -> None:
    assert device_count(allocatable) == count


def test_a_node_whose_device_plugin_took_its_gpus_out_is_still_an_accelerator_node() -> None:
    # Given a node whose GPUs all failed: the device plugin advertises none allocatable
    view = node_from_json(node_json({NVIDIA_GPU: "0"}, {NVIDIA_GPU: "8"}))
    # Then it is still an accelerator node (the scan must see it), with 0 accelerators to cover
    assert is_accelerator_node(view)
    assert node_accelerator_count(view) == 0
    assert not is_accelerator_node(node_from_json(node_json({EFA: "1"})))


# ------------------------------------------------------------------------------ the pod's


def test_a_pods_requests_count_limits_init_containers_and_sidecars() -> None:
    pod = pod_from_json(
        pod_json(
            "trainer-0",
            {NEURON: "4", EFA: "2"},
            initContainers=[
                {"name": "warm", "resources": {"limits": {NEURON: "8"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {EFA: "1"}}},
            ],
        )
    )
    # the largest init container (8) beats the containers (4); the sidecar adds to the containers
    assert pod.requests == {NEURON: 8, EFA: 3}
    assert pod_accelerators(pod).requests == {EFA: 3, NEURON: 8}


DRA_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "trainer-0-gpus-x7k2p", "namespace": "ml"},
    "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}},
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "trn-1", "device": "gpu-0"},
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "trn-1", "device": "gpu-1"},
                    {
                        "request": "watch",
                        "driver": "gpu.nvidia.com",
                        "pool": "trn-1",
                        "device": "gpu-2",
                        "adminAccess": True,
                    },
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "uid-trainer-0"}],
    },
}


def dra_pod(name: str = "trainer-0") -> dict[str, Any]:
    obj = pod_json(name, {}, resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}])
    obj["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "trainer-0-gpus-x7k2p"}]
    return obj


def test_a_pods_dra_devices_are_its_accelerators_when_the_claim_is_reserved_for_it() -> None:
    claim = resource_claim_from_json(DRA_CLAIM)
    mine = pod_accelerators(pod_from_json(dra_pod()), [claim])
    other = pod_accelerators(pod_from_json(dra_pod("trainer-1")), [claim])
    assert [d.key for d in mine.devices] == ["gpu.nvidia.com/trn-1/gpu-0", "gpu.nvidia.com/trn-1/gpu-1"]
    assert mine.count == 2
    assert other.devices == ()  # it names the claim, but the claim is not reserved for it


# ------------------------------------------------------------------------------ what a replacement requests


NODEPOOL: dict[str, Any] = {
    "metadata": {"name": "trainium"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "neuron"},
                "requirements": [
                    {"key": ITYPE, "operator": "In", "values": ["trn1.32xlarge", "trn2.48xlarge"]},
                    {"key": CAP, "operator": "In", "values": ["on-demand"]},
                    {"key": ZONE, "operator": "In", "values": ["us-west-2b", "us-west-2d"]},
                ],
            }
        }
    },
}


def test_a_trainium_replacement_requests_every_neuron_device_and_efa_interface_its_pods_request() -> None:
    # Given two Trainium ranks with EFA on a trn1 node, and a DaemonSet that does not move
    pods = [pod_from_json(pod_json(f"rank-{i}", {NEURON: "8", EFA: "4"})) for i in range(2)]
    pods.append(
        pod_from_json(
            {
                **pod_json("neuron-monitor", {NEURON: "0"}),
                "metadata": {
                    "name": "neuron-monitor",
                    "namespace": "kube-system",
                    "ownerReferences": [{"kind": "DaemonSet", "name": "nm", "controller": True}],
                },
            }
        )
    )
    node = node_from_json(node_json({NEURON: "16", NEURONCORE: "32", EFA: "8"}))
    # When the NodeClaim is built
    manifest, _ = nodeclaim_manifest(NODEPOOL, node, pods, "evt-trn")
    # Then it requests 16 Neuron devices and 8 EFA interfaces, not just GPUs
    assert manifest["spec"]["resources"] == {"requests": {NEURON: "16", EFA: "8", "pods": "2"}}


def test_mig_slices_keep_the_interrupted_nodes_gpu_count_and_model() -> None:
    labels = {GPU_COUNT_LABEL: "8", GPU_NAME_LABEL: "a100"}
    node = node_from_json(node_json({"nvidia.com/mig-1g.10gb": "56"}, labels=labels))
    pods = [pod_from_json(pod_json("infer", {"nvidia.com/mig-1g.10gb": "2"}))]
    manifest, why = nodeclaim_manifest(NODEPOOL, node, pods, "evt-mig")
    requirements = manifest["spec"]["requirements"]
    assert {"key": GPU_COUNT_LABEL, "operator": "In", "values": ["8"]} in requirements
    assert {"key": GPU_NAME_LABEL, "operator": "In", "values": ["a100"]} in requirements
    # a MIG slice is nothing Karpenter can request: the claim asks for the pod, not its slices
    assert manifest["spec"]["resources"] == {"requests": {"pods": "1"}}
    assert "which Karpenter cannot request" in why


def test_dra_devices_keep_the_model_of_their_drivers_family() -> None:
    labels = {GPU_COUNT_LABEL: "8", GPU_NAME_LABEL: "h100", ACCELERATOR_COUNT_LABEL: "1", ACCELERATOR_NAME_LABEL: "x"}
    node = node_from_json(node_json({}, labels=labels))
    claim = resource_claim_from_json(DRA_CLAIM)
    demand = replacement_demand([pod_from_json(dra_pod())], [claim])
    manifest, why = nodeclaim_manifest(NODEPOOL, node, [pod_from_json(dra_pod())], "evt-dra", claims=[claim])
    keys = {r["key"] for r in manifest["spec"]["requirements"]}
    assert (demand.keep_gpu_model, demand.keep_accelerator_model) == (True, False)
    assert {GPU_COUNT_LABEL, GPU_NAME_LABEL} <= keys
    assert ACCELERATOR_COUNT_LABEL not in keys
    assert "holds 2 DRA devices (gpu.nvidia.com)" in why


def test_neurondevice_keeps_the_accelerator_model_and_says_when_the_node_has_none() -> None:
    pods = [pod_from_json(pod_json("rank-0", {NEURONDEVICE: "16"}))]
    labelled = node_from_json(node_json({NEURONDEVICE: "16"}, labels={ACCELERATOR_COUNT_LABEL: "16"}))
    bare = node_from_json(node_json({NEURONDEVICE: "16"}))
    kept, _ = nodeclaim_manifest(NODEPOOL, labelled, pods, "evt-1")
    _, why = nodeclaim_manifest(NODEPOOL, bare, pods, "evt-2")
    assert {"key": ACCELERATOR_COUNT_LABEL, "operator": "In", "values": ["16"]} in kept["spec"]["requirements"]
    assert "its accelerator model is not kept" in why


def test_a_kept_model_the_pool_rules_out_is_no_replacement() -> None:
    pool = {**NODEPOOL, "spec": {"template": {"spec": {**NODEPOOL["spec"]["template"]["spec"]}}}}
    pool["spec"]["template"]["spec"]["requirements"] = [
        *NODEPOOL["spec"]["template"]["spec"]["requirements"],
        {"key": GPU_COUNT_LABEL, "operator": "In", "values": ["4"]},
    ]
    node = node_from_json(node_json({"nvidia.com/mig-1g.10gb": "56"}, labels={GPU_COUNT_LABEL: "8"}))
    pods = [pod_from_json(pod_json("infer", {"nvidia.com/mig-1g.10gb": "2"}))]
    with pytest.raises(NoFittingReplacement, match=GPU_COUNT_LABEL):
        nodeclaim_manifest(pool, node, pods, "evt-x")


# ------------------------------------------------------------------------------ the table in the docs


def test_the_accelerator_table_in_the_docs_is_the_codes() -> None:
    text = (DOCS / "gpu-signals.md").read_text()
    for row in ACCELERATOR_TABLE:
        line = next((ln for ln in text.splitlines() if ln.startswith(f"| `{row.resource.split(', ')[0]}`")), None)
        assert line is not None, row.resource
        assert row.replacement in line, (row.resource, line)
