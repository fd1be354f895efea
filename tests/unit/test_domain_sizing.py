"""A replacement sized as Karpenter sizes one, and one of its pool's nodes (docs/cluster.md, "What a
replacement requests"): the moved pods' requests as kube-scheduler counts them, the DaemonSet pods
that will run there, the pool's cpu/memory limits checked with them, the NodePool's owner reference
and hash."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpuwarden.domain.nodepools import nodepool_from_json
from gpuwarden.domain.quantity import format_quantity
from gpuwarden.domain.replacement import nodeclaim_manifest
from gpuwarden.domain.resources import pod_requests
from gpuwarden.domain.sizing import daemon_pods, daemons_for, displaced, size
from gpuwarden.domain.tiers import tiers
from gpuwarden.domain.views import NodeView, node_from_json, pod_from_json

GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neuron"
GPU_TAINT = {"key": GPU, "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def pool(name: str = "gpu-training", *, taints: Any = (GPU_TAINT,), **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {
                "karpenter.sh/nodepool-hash": "6849386175284186929",
                "karpenter.sh/nodepool-hash-version": "v3",
            },
        },
        "spec": {
            "template": {
                "metadata": {"labels": {"workload": "training"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["p4d.24xlarge", "p5.48xlarge"],
                        },
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "taints": list(taints),
                },
            },
            **spec,
        },
    }


def node(pool_name: str = "gpu-training") -> NodeView:
    return node_from_json(
        {
            "metadata": {
                "name": "n1",
                "resourceVersion": "1",
                "labels": {
                    "karpenter.sh/nodepool": pool_name,
                    "karpenter.sh/capacity-type": "on-demand",
                    "node.kubernetes.io/instance-type": "p4d.24xlarge",
                },
            },
            "spec": {"providerID": "aws:///us-west-2a/i-0abc1234def567890"},
            "status": {"capacity": {"cpu": "96", "memory": "1152Gi", GPU: "8", "pods": "737"}},
        }
    )


def container(name: str = "main", **requests: str) -> dict[str, Any]:
    asked = {k.replace("_", "-").replace("gpu", GPU): v for k, v in requests.items()}
    return {"name": name, "image": "busybox", "resources": {"requests": asked, "limits": dict(asked)}}


def pod(name: str, *containers: dict[str, Any], owner: str | None = "Job", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": owner, "name": name, "controller": True}]
    body = {"nodeName": "n1", "tolerations": [GPU_TOLERATION], "containers": list(containers) or [container()], **spec}
    return {"metadata": meta, "spec": body, "status": {"phase": "Running"}}


def daemonset(name: str, cpu: str, memory: str, **pod_spec: Any) -> dict[str, Any]:
    spec = {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": cpu, "memory": memory}}}],
        **pod_spec,
    }
    return {"metadata": {"name": name, "namespace": "kube-system"}, "spec": {"template": {"spec": spec}}}


#: The DaemonSets of an EKS GPU cluster: the device plugin (tolerates the GPU taint), kube-proxy
#: (tolerates everything), a CPU-only log agent (no toleration), one selecting a label no GPU pool defines.
DAEMONSETS = [
    daemonset("nvidia-device-plugin", "100m", "128Mi", tolerations=[GPU_TOLERATION]),
    daemonset("kube-proxy", "100m", "64Mi", tolerations=[{"operator": "Exists"}]),
    daemonset("fluent-bit", "500m", "1Gi"),
    daemonset("infra-agent", "1", "1Gi", tolerations=[{"operator": "Exists"}], nodeSelector={"team": "infra"}),
]


def trainers() -> list[Any]:
    """Two pods asking 16 CPU, 128 GiB and 4 GPUs between them."""
    return [
        pod_from_json(pod("train-0", container(cpu="6", memory="48Gi", gpu="1"))),
        pod_from_json(pod("train-1", container(cpu="10", memory="80Gi", gpu="3"))),
    ]


def test_the_claim_asks_for_the_pods_requests_plus_the_daemonsets_that_run_there() -> None:
    # Given two trainers asking 16 CPU / 128 GiB / 4 GPUs between them, and the cluster's DaemonSets
    daemons = daemon_pods(DAEMONSETS)
    # When their replacement is built from the GPU pool
    manifest, why = nodeclaim_manifest(pool(), node(), trainers(), "evt-1", daemons=daemons)
    # Then it asks for all of it, plus the device plugin's and kube-proxy's requests (the log agent
    # does not tolerate the GPU taint; the infra agent selects a label the pool does not define)
    assert manifest["spec"]["resources"]["requests"] == {
        "cpu": "16200m",
        "memory": "131264Mi",  # 128 Gi + 128 Mi + 64 Mi
        GPU: "4",
        "pods": "4",
    }
    assert "2 pods and 2 DaemonSet pods (kube-system/nvidia-device-plugin, kube-system/kube-proxy)" in why


def test_a_daemonset_counts_where_its_taints_and_selectors_let_it_run() -> None:
    daemons = daemon_pods(DAEMONSETS)
    untainted = nodepool_from_json(pool("cpu", taints=()))
    tainted = nodepool_from_json(pool())
    infra = nodepool_from_json(pool("infra", taints=()))
    infra_with_label = nodepool_from_json(
        {**pool("infra", taints=()), "spec": {"template": {"metadata": {"labels": {"team": "infra"}}, "spec": {}}}}
    )
    assert [d.name for d in daemons_for(tainted, daemons)] == ["nvidia-device-plugin", "kube-proxy"]
    assert [d.name for d in daemons_for(untainted, daemons)] == ["nvidia-device-plugin", "kube-proxy", "fluent-bit"]
    assert "infra-agent" not in [d.name for d in daemons_for(infra, daemons)]
    assert "infra-agent" in [d.name for d in daemons_for(infra_with_label, daemons)]


def test_init_containers_sidecars_pod_level_resources_and_overhead_count_as_kube_scheduler_counts_them() -> None:
    # an init container larger than the containers: the largest wins
    spec = pod("a", container(cpu="1", memory="1Gi"), initContainers=[container("init", cpu="4", memory="512Mi")])[
        "spec"
    ]
    assert pod_requests(spec) == {"cpu": 4, "memory": 2**30}
    # a sidecar (restartable init container) runs beside the containers and beside later init containers
    sidecar = {**container("proxy", cpu="500m", memory="256Mi"), "restartPolicy": "Always"}
    spec = pod("b", container(cpu="1"), initContainers=[sidecar, container("setup", cpu="3")])["spec"]
    assert pod_requests(spec)["cpu"] == Fraction(7, 2)  # max(1 + 0.5, 3 + 0.5)
    assert pod_requests(spec)["memory"] == 256 * 2**20
    # RuntimeClass overhead is added; pod-level requests replace the containers' cpu and memory
    spec = pod("c", container(cpu="2", gpu="1"), overhead={"cpu": "250m", "memory": "120Mi"})["spec"]
    assert pod_requests(spec) == {"cpu": Fraction(9, 4), "memory": 120 * 2**20, GPU: 1}
    spec = pod("d", container(cpu="2"), resources={"requests": {"cpu": "8", "memory": "32Gi"}})["spec"]
    assert pod_requests(spec) == {"cpu": 8, "memory": 32 * 2**30}


def test_a_pod_with_an_init_container_is_sized_by_its_largest_step() -> None:
    trainer = pod_from_json(
        pod(
            "t", container(cpu="8", memory="64Gi", gpu="4"), initContainers=[container("fetch", cpu="12", memory="8Gi")]
        )
    )
    sized = size([trainer])
    assert sized.manifest() == {"cpu": "12", "memory": "64Gi", GPU: "4", "pods": "1"}


def test_mirror_daemonset_and_finished_pods_are_not_what_a_replacement_is_for() -> None:
    # Given a Trainium node: its trainer, its own mirror pod (no toleration of the Neuron taint),
    # a DaemonSet pod and a finished pod
    neuron_taint = {"key": NEURON, "value": "true", "effect": "NoSchedule"}
    toleration = [{"key": NEURON, "operator": "Exists", "effect": "NoSchedule"}]
    trainer = pod_from_json(
        pod("ft-0", container(cpu="32", memory="256Gi", **{"aws.amazon.com/neuron": "16"}), tolerations=toleration)
    )
    mirror = pod("gpu-health-monitor-n1", container(cpu="100m"), owner="Node", tolerations=[])
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    ds = pod_from_json(pod("neuron-device-plugin-x", container(cpu="100m"), owner="DaemonSet"))
    done = pod_from_json({**pod("old", container(cpu="64", gpu="8")), "status": {"phase": "Succeeded"}})
    pods = [trainer, pod_from_json(mirror), ds, done]
    # Then only the trainer moves, and a pool with the Neuron taint takes it
    assert displaced(pods) == [trainer]
    trn = nodepool_from_json(pool("trn", taints=[neuron_taint]))
    found = tiers("trn", [trn], displaced(pods), node("trn"), size(displaced(pods)).requests)
    assert found.usable == ("trn",), found.reason


def test_a_pool_whose_cpu_limit_has_no_room_goes_to_the_next_tier_named() -> None:
    # Given the node's own pool with 48 CPU of 64 in use (a voluntary replacement: the node's own
    # capacity is not leaving), and an on-demand tier with room
    limits = {"cpu": "64", GPU: "64"}
    full = nodepool_from_json({**pool("gpu-spot", limits=limits, weight=100), "status": {"resources": {"cpu": "48"}}})
    roomy = nodepool_from_json(pool("gpu-on-demand", limits={"cpu": "1000", "memory": "4Ti"}, weight=10))
    daemons = daemon_pods(DAEMONSETS)
    requests = size(trainers()).requests
    # When the tiers are read for the two trainers (16 CPU, plus 200m of DaemonSet pods)
    found = tiers("gpu-spot", [full, roomy], trainers(), node("gpu-spot"), requests, daemons=daemons)
    # Then the own pool is refused by its cpu limit, by how much, and the next tier takes it
    assert found.usable == ("gpu-on-demand",)
    assert found.reason == "NodePool gpu-spot: spec.limits cpu is 64; 48 in use and 16.2 for the replacement make 64.2"
    # (without the DaemonSet pods the 16 CPU alone would have fitted)
    assert tiers("gpu-spot", [full], trainers(), node("gpu-spot"), requests).usable == ("gpu-spot",)


def test_a_memory_limit_is_checked_with_the_pods_memory() -> None:
    tight = nodepool_from_json({**pool(limits={"memory": "1Ti"}), "status": {"resources": {"memory": "960Gi"}}})
    found = tiers("gpu-training", [tight], trainers(), node(), size(trainers()).requests)
    assert found.usable == ()
    assert "NodePool gpu-training: spec.limits memory is 1099511627776; 1030792151040 in use" in found.reason


def test_the_claim_is_one_of_its_pools_nodes_owner_reference_and_hash() -> None:
    manifest, _ = nodeclaim_manifest(pool(), node(), trainers(), "evt-1")
    meta = manifest["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": "gpu-training",
            "uid": "uid-gpu-training",
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["annotations"]["karpenter.sh/nodepool-hash"] == "6849386175284186929"
    assert meta["annotations"]["karpenter.sh/nodepool-hash-version"] == "v3"


def test_quantities_read_back_as_the_api_server_reads_them() -> None:
    assert format_quantity(Fraction(81, 5)) == "16200m"
    assert format_quantity(Fraction(128 * 2**30), binary=True) == "128Gi"
    assert format_quantity(Fraction(1536 * 2**20), binary=True) == "1536Mi"
    assert format_quantity(Fraction(1000), binary=True) == "1000"
    assert format_quantity(Fraction(1, 3)) == "333333334n"
