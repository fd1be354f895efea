"""Limits and tiers (domain.tiers) and zonal volumes (domain.volumes): where a replacement may be
created, and why every other place may not (docs/cluster.md, "Limits and tiers", "Volumes")."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.domain.errors import NoFittingReplacement
from gpuwarden.domain.nodepools import nodepool_from_json
from gpuwarden.domain.replacement import nodeclaim_manifest
from gpuwarden.domain.tiers import by_weight, limits_refusal, tiers
from gpuwarden.domain.views import NodeView, PodView, Toleration, node_from_json, pod_from_json
from gpuwarden.domain.volumes import VolumePin, pv_from_json, pvc_from_json, volume_pin

ITYPE, ZONE, CAP = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type"
GPU = "nvidia.com/gpu"


def pool_json(
    name: str,
    *,
    capacity: tuple[str, ...] = ("spot",),
    weight: int | None = None,
    limit: str | None = "64",
    used: str = "0",
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2b"),
    taint: str = GPU,
    **spec: Any,
) -> dict[str, Any]:
    """A seed-style GPU pool: a GPU cap, a GPU taint, Spot or on-demand (its tier)."""
    obj: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"tier": name}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {"key": ITYPE, "operator": "In", "values": ["p4d.24xlarge", "p5.48xlarge"]},
                        {"key": CAP, "operator": "In", "values": list(capacity)},
                        {"key": ZONE, "operator": "In", "values": list(zones)},
                    ],
                    "taints": [{"key": taint, "effect": "NoSchedule"}],
                },
            },
            **({"limits": {GPU: limit}} if limit is not None else {}),
            **({"weight": weight} if weight is not None else {}),
            **spec,
        },
        "status": {"resources": {GPU: used, "nodes": str(int(used) // 8)}},
    }
    return obj


def spot_node(pool: str = "gpu-spot", zone: str = "us-west-2a") -> NodeView:
    return node_from_json(
        {
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": pool, ITYPE: "p4d.24xlarge", CAP: "spot"}},
            "spec": {"providerID": f"aws:///{zone}/i-0abc1234def567890"},
            "status": {"capacity": {GPU: "8"}, "allocatable": {GPU: "8"}},
        }
    )


def rank(name: str = "rank-0", **fields: Any) -> PodView:
    fields.setdefault("tolerations", (Toleration(GPU, "Exists", effect="NoSchedule"),))
    return PodView("ml", name, name, "n1", "Running", gpu_request=8, requests={GPU: 8}, **fields)


# ------------------------------------------------------------------------------ limits


def test_a_full_pool_has_no_room_and_says_by_how_much() -> None:
    # Given the seed's GPU cap of 64, with 64 in use
    full = nodepool_from_json(pool_json("gpu-spot", used="64"))
    # When a replacement for 8 GPUs asks, Then the limit refuses it with the figures
    why = limits_refusal(full, {GPU: 8})
    assert why == ("NodePool gpu-spot: spec.limits nvidia.com/gpu is 64; 64 in use and 8 for the replacement make 72")
    assert limits_refusal(nodepool_from_json(pool_json("gpu-spot", used="56")), {GPU: 8}) is None


def test_the_node_being_lost_gives_its_capacity_back_as_karpenter_counts_it() -> None:
    full = nodepool_from_json(pool_json("gpu-spot", used="64"))
    node = spot_node()
    choice = tiers("gpu-spot", [full], [rank()], node, {GPU: 8}, lost=True).choices[0]
    assert choice.refused is None


def test_limits_on_nodes_count_the_replacement_as_one_node() -> None:
    obj = pool_json("gpu-spot", used="16")
    obj["spec"]["limits"] = {"nodes": "2"}
    assert "spec.limits nodes is 2; 2 in use and 1 for the replacement make 3" in str(
        limits_refusal(nodepool_from_json(obj), {GPU: 8})
    )


def test_a_limit_that_does_not_read_refuses() -> None:
    obj = pool_json("gpu-spot")
    obj["spec"]["limits"] = {GPU: "lots"}
    assert "do not read as quantities" in str(limits_refusal(nodepool_from_json(obj), {GPU: 8}))


# ------------------------------------------------------------------------------ tiers


def test_pools_are_ordered_by_weight_then_name_later_in_the_alphabet_first() -> None:
    pools = [
        nodepool_from_json(pool_json(name, weight=w)) for name, w in (("a", None), ("b", 10), ("c", 10), ("d", 50))
    ]
    assert [p.name for p in by_weight(pools)] == ["d", "c", "b", "a"]


def test_a_full_spot_pool_falls_back_to_the_on_demand_tier_and_names_each_pools_reason() -> None:
    # Given the seed's tiers: Spot (weight 100, full) over on-demand (weight 10), a CPU pool, a static pool
    pools = [
        nodepool_from_json(pool_json("gpu-spot", weight=100, used="64")),
        nodepool_from_json(pool_json("gpu-on-demand", capacity=("on-demand",), weight=10)),
        nodepool_from_json(pool_json("cpu", weight=50, limit=None, taint="cpu-only")),
        nodepool_from_json(pool_json("gpu-static", replicas=2, limit=None)),
    ]
    # When the replacement for a rank on the interrupted Spot node looks for a pool
    found = tiers("gpu-spot", pools, [rank()], spot_node(), {GPU: 8})
    # Then the own pool is refused by its limit, the on-demand tier takes it, and each reason is named
    assert [c.pool for c in found.choices] == ["gpu-spot", "cpu", "gpu-on-demand", "gpu-static"]
    assert found.usable == ("gpu-on-demand",)
    reasons = {c.pool: c.refused for c in found.choices}
    assert "spec.limits nvidia.com/gpu is 64" in str(reasons["gpu-spot"])
    assert "does not tolerate its taint cpu-only:NoSchedule" in str(reasons["cpu"])
    assert "static (spec.replicas)" in str(reasons["gpu-static"])
    assert found.reason.count("NodePool") == 3


def test_a_pool_the_pods_select_against_or_whose_zones_the_volumes_rule_out_does_not_admit() -> None:
    pools = [
        nodepool_from_json(pool_json("gpu-spot", used="64")),
        nodepool_from_json(pool_json("gpu-on-demand", capacity=("on-demand",), zones=("us-west-2c",))),
    ]
    pinned = tiers("gpu-spot", pools, [rank()], spot_node(), {GPU: 8}, zones=("us-west-2a",))
    spot_only = tiers("gpu-spot", pools, [rank(node_selector={CAP: "spot"})], spot_node(), {GPU: 8})
    assert "must stay in us-west-2a" in str(pinned.choices[1].refused)
    assert "no value of karpenter.sh/capacity-type" in str(spot_only.choices[1].refused)
    assert pinned.usable == spot_only.usable == ()


def test_any_of_a_pods_affinity_terms_may_admit_it() -> None:
    from gpuwarden.domain.views import NodeSelectorRequirement as Expr

    terms = ((Expr(CAP, "In", ("spot",)),), (Expr(CAP, "In", ("on-demand",)),))
    pools = [nodepool_from_json(pool_json("gpu-on-demand", capacity=("on-demand",)))]
    assert tiers("gpu-spot", pools, [rank(required_node_affinity=terms)], spot_node(), {GPU: 8}).usable == (
        "gpu-on-demand",
    )


def test_an_own_pool_that_is_gone_is_named() -> None:
    found = tiers("gpu-spot", [], [rank()], spot_node(), {GPU: 8})
    assert found.reason == "NodePool gpu-spot is not in the cluster"


# ------------------------------------------------------------------------------ volumes


def ebs_pv(name: str, zone: str, key: str = "topology.ebs.csi.aws.com/zone") -> dict[str, Any]:
    """A PV as the EBS CSI driver provisions it (node affinity on its own zone key)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [zone]}]}]
                }
            },
        },
    }


def checkpointing_rank(name: str = "rank-0") -> PodView:
    obj = {
        "metadata": {"name": name, "namespace": "ml", "uid": name},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "t", "resources": {"limits": {GPU: "8"}}}],
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": f"ckpt-{name}"}}],
        },
        "status": {"phase": "Running"},
    }
    return pod_from_json(obj)


def pvc(name: str, volume: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"volumeName": volume} if volume else {}}


def test_a_pods_zonal_checkpoint_volume_pins_it_to_its_zone() -> None:
    pin = volume_pin(
        [checkpointing_rank()],
        [pvc_from_json(pvc("ckpt-rank-0", "pv-1"))],
        [pv_from_json(ebs_pv("pv-1", "us-west-2b"))],
    )
    assert pin.zones == ("us-west-2b",)
    assert pin.reasons == ("ml/rank-0's volume ckpt-rank-0 (pv-1) is in us-west-2b",)


def test_unbound_claims_and_volumes_without_a_zone_pin_nothing() -> None:
    regional = {"metadata": {"name": "pv-efs"}, "spec": {"csi": {"driver": "efs.csi.aws.com"}}}
    pin = volume_pin(
        [checkpointing_rank(), checkpointing_rank("rank-1")],
        [pvc_from_json(pvc("ckpt-rank-0", None)), pvc_from_json(pvc("ckpt-rank-1", "pv-efs"))],
        [pv_from_json(regional)],
    )
    assert pin == VolumePin(None, ())


def test_volumes_in_two_zones_leave_no_one_replacement() -> None:
    with pytest.raises(NoFittingReplacement, match="share no zone"):
        volume_pin(
            [checkpointing_rank(), checkpointing_rank("rank-1")],
            [pvc_from_json(pvc("ckpt-rank-0", "pv-a")), pvc_from_json(pvc("ckpt-rank-1", "pv-b"))],
            [pv_from_json(ebs_pv("pv-a", "us-west-2a")), pv_from_json(ebs_pv("pv-b", "us-west-2b", ZONE))],
        )


def test_the_replacement_stays_in_the_volumes_zone_and_leaves_the_pool_by_capacity_type() -> None:
    # Given a Spot node in us-west-2a whose rank's checkpoint volume is in us-west-2a, a pool with both capacity types
    pool = pool_json("gpu-spot", capacity=("spot", "on-demand"))
    pin = VolumePin(("us-west-2a",), ("ml/rank-0's volume ckpt-rank-0 (pv-1) is in us-west-2a",))
    # When the NodeClaim is built
    manifest, why = nodeclaim_manifest(pool, spot_node(), [checkpointing_rank()], "evt-1", volumes=pin)
    requirements = manifest["spec"]["requirements"]
    # Then it is held to us-west-2a, and leaves the interrupted pool by going on-demand
    assert {"key": ZONE, "operator": "In", "values": ["us-west-2a"]} in requirements
    assert {"key": CAP, "operator": "In", "values": ["on-demand"]} in requirements
    assert "is in us-west-2a" in why


def test_no_replacement_where_the_volumes_zone_leaves_only_the_interrupted_pool() -> None:
    pool = pool_json("gpu-spot")
    pool["spec"]["template"]["spec"]["requirements"][0]["values"] = ["p4d.24xlarge"]
    pin = VolumePin(("us-west-2a",), ("ml/rank-0's volume ckpt-rank-0 (pv-1) is in us-west-2a",))
    with pytest.raises(NoFittingReplacement, match="leaves only the interrupted capacity pool"):
        nodeclaim_manifest(pool, spot_node(), [checkpointing_rank()], "evt-1", volumes=pin)


def test_no_replacement_where_the_pool_excludes_the_volumes_zone() -> None:
    pin = VolumePin(("us-west-2d",), ())
    with pytest.raises(
        NoFittingReplacement, match="keep them in us-west-2d; the NodePool and the pods allow us-west-2a"
    ):
        nodeclaim_manifest(pool_json("gpu-spot"), spot_node(), [checkpointing_rank()], "evt-1", volumes=pin)


def test_the_volumes_zone_wins_over_the_gangs_zone() -> None:
    pool = pool_json("gpu-spot", capacity=("spot", "on-demand"))
    pin = VolumePin(("us-west-2b",), ())
    manifest, _ = nodeclaim_manifest(
        pool, spot_node(), [checkpointing_rank()], "evt-1", ["us-west-2a"] * 3, volumes=pin
    )
    zones = [r for r in manifest["spec"]["requirements"] if r["key"] == ZONE]
    assert zones[-1] == {"key": ZONE, "operator": "In", "values": ["us-west-2b"]}


def test_a_generic_ephemeral_volumes_claim_is_named_after_the_pod_and_the_volume() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "rank-0", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "t"}],
            "volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}},
                {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-rank-0"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }
    assert pod_from_json(obj).volume_claims == ("rank-0-scratch", "ckpt-rank-0")


def test_a_volume_with_terms_for_two_zones_allows_either_and_one_without_a_zone_pins_nothing() -> None:
    two = ebs_pv("pv-2", "us-west-2a")
    two["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"].append(
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-west-2c"]}]}
    )
    loose = ebs_pv("pv-3", "us-west-2a")
    loose["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"].append(
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
    )
    assert pv_from_json(two).zones == ("us-west-2a", "us-west-2c")
    assert pv_from_json(loose).zones is None
