"""Where a reclaimed node's pods go next (domain/reschedule.py), as Karpenter's consolidation asks."""

from __future__ import annotations

from gpuwarden.domain.predicates import tolerates
from gpuwarden.domain.reschedule import candidates, free_gpus, must_place, recreated, would_come_back
from gpuwarden.domain.views import NodeSelectorRequirement, NodeView, PodView, Taint, Toleration

GPU_TAINT = Taint("nvidia.com/gpu", "NoSchedule", "true")
POOL = "karpenter.sh/nodepool"


def node(
    name: str, gpus: int = 1, *, pool: str = "gpu-notebooks", taints: tuple[Taint, ...] = (GPU_TAINT,), **kw: object
) -> NodeView:
    return NodeView(name=name, resource_version="1", labels={POOL: pool}, taints=taints, gpu_capacity=gpus, **kw)  # type: ignore[arg-type]


def pod(
    name: str,
    *,
    on: str = "idle",
    gpus: int = 1,
    owner: str | None = "StatefulSet",
    phase: str = "Running",
    **kw: object,
) -> PodView:
    return PodView(
        namespace="research",
        name=name,
        uid=name,
        node_name=on,
        phase=phase,
        owner_kind=owner,
        owner_name=f"{name}-owner" if owner else None,
        gpu_request=gpus,
        tolerations=(Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule"),),
        **kw,  # type: ignore[arg-type]
    )


def place(movers: list[PodView], nodes: list[NodeView], used: dict[str, int]) -> list[str]:
    near = candidates(movers, nodes, "idle")
    return [s.pod for s in would_come_back(movers, lambda n: n.gpu_capacity - used.get(n.name, 0), near)]


def test_a_pod_its_controller_recreates_blocks_but_bare_finished_and_daemonset_pods_do_not() -> None:
    assert recreated(pod("nb", owner="StatefulSet"))
    assert recreated(pod("rs", owner="ReplicaSet"))
    assert recreated(pod("job", owner="Job"))
    assert not recreated(pod("bare", owner=None))
    assert not recreated(pod("done", owner="Job", phase="Succeeded"))
    assert not recreated(pod("ds", owner="DaemonSet"))
    assert [p.name for p in must_place([pod("nb"), pod("bare", owner=None), pod("cpu", gpus=0)])] == ["nb"]


def test_a_recreated_pod_with_no_free_gpu_elsewhere_would_come_straight_back() -> None:
    # Given the idle node's notebook (StatefulSet) and every other notebook node full
    movers = must_place([pod("notebook-0")])
    nodes = [node("idle"), node("a"), node("b")]
    assert place(movers, nodes, {"a": 1, "b": 1}) == ["research/notebook-0"]
    # and with one GPU free on another node it fits there
    assert place(movers, nodes, {"a": 1}) == []


def test_taints_it_does_not_tolerate_nodeselector_and_required_affinity_keep_a_pod_off_a_node() -> None:
    movers = must_place([pod("nb")])
    assert place(movers, [node("idle"), node("t", taints=(Taint("dedicated", "NoSchedule", "infer"),))], {}) == [
        "research/nb"
    ]
    assert place(movers, [node("idle"), node("c", unschedulable=True)], {}) == ["research/nb"]
    selective = must_place([pod("nb", node_selector={POOL: "gpu-notebooks"})])
    assert place(selective, [node("idle"), node("other", pool="gpu-training")], {}) == ["research/nb"]
    affinity = (
        (NodeSelectorRequirement(POOL, "In", ("gpu-training",)),),
        (NodeSelectorRequirement("gpu.size", "Gt", ("40",)),),
    )
    picky = must_place([pod("nb", required_node_affinity=affinity)])
    assert place(picky, [node("idle"), node("n", pool="gpu-notebooks")], {}) == ["research/nb"]
    assert place(picky, [node("idle"), node("t", pool="gpu-training")], {}) == []


def test_pods_are_placed_together_most_gpus_first() -> None:
    # Given two pods (4 and 1 GPUs) and 4 free GPUs on one other node: only one of them fits
    movers = must_place([pod("small", gpus=1), pod("big", gpus=4)])
    assert [p.name for p in movers] == ["big", "small"]
    assert place(movers, [node("idle", 8), node("x", 4)], {}) == ["research/small"]


def test_tolerations_follow_kubernetes_rules() -> None:
    taint = Taint("k", "NoSchedule", "v")
    assert tolerates((Toleration("", "Exists"),), taint)
    assert tolerates((Toleration("k", "Exists", effect="NoSchedule"),), taint)
    assert tolerates((Toleration("k", "Equal", "v"),), taint)
    assert not tolerates((Toleration("k", "Equal", "w"),), taint)
    assert not tolerates((Toleration("k", "Exists", effect="NoExecute"),), taint)


def test_free_gpus_count_what_the_node_pods_ask() -> None:
    n = node("x", 8)
    assert free_gpus(n, [pod("a", on="x", gpus=2), pod("b", on="x", gpus=3, phase="Succeeded")]) == 6


def test_free_gpus_are_of_the_allocatable_as_kube_scheduler_counts() -> None:
    # Given a node whose capacity says 4 GPUs and allocatable 8 (Karpenter's KWOK provider: capacity
    # is the NodeClaim's requests, allocatable the instance type's)
    n = node("x", 4, allocatable={"nvidia.com/gpu": 8})
    # Then 4 of them are free beside a 4-GPU pod, as the scheduler would bind a fifth GPU there
    assert free_gpus(n, [pod("a", on="x", gpus=4)]) == 4


def test_a_pod_held_to_its_volumes_zone_goes_only_to_a_node_there() -> None:
    from gpuwarden.domain.volumes import ClaimView, VolumeView, pod_zones

    # Given a notebook whose EBS volume is in us-west-2b, and a free GPU only in us-west-2a
    notebook = pod("nb", volume_claims=("home-nb",))
    pins = pod_zones([notebook], [ClaimView("research", "home-nb", "pv-1")], [VolumeView("pv-1", ("us-west-2b",))])
    movers = must_place([notebook])
    elsewhere = [node("idle"), node("a", provider_id="aws:///us-west-2a/i-0abc1234def567890")]
    there = [node("idle"), node("b", provider_id="aws:///us-west-2b/i-0abc1234def567891")]
    # Then it would come back on new capacity, unless a node in its volume's zone has a GPU free
    assert pins == {"research/nb": ("us-west-2b",)}
    assert [s.pod for s in would_come_back(movers, lambda n: 1, candidates(movers, elsewhere, "idle", pins), pins)] == [
        "research/nb"
    ]
    assert would_come_back(movers, lambda n: 1, candidates(movers, there, "idle", pins), pins) == []
