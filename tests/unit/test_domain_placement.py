"""Where a replacement lands: the moved pods' nodeSelector, required node affinity and tolerations,
their gang's zone, and the spot steering that stays."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.domain.errors import NoFittingReplacement
from gpuwarden.domain.placement import chosen_term, gang_zone, one_per_key, pod_requirements, values_for
from gpuwarden.domain.predicates import tolerates
from gpuwarden.domain.replacement import nodeclaim_manifest, place
from gpuwarden.domain.views import NodeSelectorRequirement, NodeView, PodView, Taint, Toleration, pod_from_json

ITYPE, ZONE, CAP = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type"
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
GPU_TAINT = Taint("nvidia.com/gpu", "NoSchedule")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def req(key: str, op: str = "In", *values: str, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out | more


def tol(raw: dict[str, str]) -> Toleration:
    """A pod spec's toleration, as the pod's view reads it."""
    return Toleration(raw.get("key", ""), raw.get("operator", "Equal"), raw.get("value"), raw.get("effect", ""))


def terms_of(*terms: tuple[dict[str, Any], ...]) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    """Required node-affinity terms, as the pod's view reads them."""
    return tuple(
        tuple(NodeSelectorRequirement(r["key"], r["operator"], tuple(r.get("values", ()))) for r in t) for t in terms
    )


POOL = [
    req(ITYPE, "In", "p4d.24xlarge", "p5.48xlarge"),
    req(CAP, "In", "spot", "on-demand"),
    req(ZONE, "In", "us-west-2a", "us-west-2b", "us-west-2c"),
]


def node(zone: str = "us-west-2b", capacity: str = "spot", **labels: str) -> NodeView:
    return NodeView(
        name="n1",
        resource_version="7",
        provider_id=f"aws:///{zone}/i-0abc1234def567890",
        labels={ITYPE: "p4d.24xlarge", CAP: capacity, ZONE: zone, "karpenter.sh/nodepool": "gpu", **labels},
    )


def rank(name: str = "rank-1", **fields: Any) -> PodView:
    fields.setdefault("tolerations", (tol(GPU_TOLERATION),))
    return PodView("ml", name, name, "n1", "Running", gpu_request=8, **fields)


# ------------------------------------------------------------------------------ the pods' side


def test_pod_json_carries_its_node_selector_required_affinity_and_tolerations() -> None:
    # Given a pod spec with a nodeSelector, two required terms (one with matchFields) and a preferred term
    spec = {
        "nodeSelector": {"team": "ml"},
        "tolerations": [GPU_TOLERATION],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [req(ZONE, "In", "us-west-2a")]},
                        {"matchFields": [req("metadata.name", "In", "n9")]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [req(ITYPE, "In", "p5.48xlarge")]}}
                ],
            }
        },
    }
    # When it is read
    view = pod_from_json({"metadata": {"name": "p", "namespace": "ml"}, "spec": spec})
    # Then the view holds what a replacement must honour (preferences are not requirements)
    assert view.node_selector == {"team": "ml"}
    assert view.required_node_affinity == terms_of((req(ZONE, "In", "us-west-2a"),), ())
    assert view.tolerations == (tol(GPU_TOLERATION),)


def test_the_term_the_node_matches_is_the_one_honoured() -> None:
    # Given a pod whose required affinity allows p5 anywhere, or p4d in us-west-2b
    terms = terms_of(
        (req(ITYPE, "In", "p5.48xlarge"),), (req(ITYPE, "In", "p4d.24xlarge"), req(ZONE, "In", "us-west-2b"))
    )
    pod = rank(required_node_affinity=terms)
    # When its node is a p4d in us-west-2b, Then the second term is the one it was scheduled by
    assert chosen_term(pod, node().labels) == terms[1]
    # And when no term matches any more, the first one is taken
    assert chosen_term(pod, {ITYPE: "g5.2xlarge"}) == terms[0]


def test_hostname_and_karpenter_domain_keys_are_left_out_with_a_reason() -> None:
    # Given a pod pinned to its node by hostname and selecting a Karpenter-internal label
    pod = rank(node_selector={"kubernetes.io/hostname": "n1", "karpenter.sh/registered": "true", "team": "ml"})
    # When its requirements are built
    kept, dropped = pod_requirements(pod, node().labels)
    # Then only the label a NodeClaim may carry is kept; the others are named
    assert kept == [req("team", "In", "ml")]
    assert len(dropped) == 2
    assert any("kubernetes.io/hostname" in d for d in dropped)


@pytest.mark.parametrize(
    ("toleration", "taint", "ok"),
    [
        ({"operator": "Exists"}, Taint("any", "NoExecute"), True),
        ({"key": "team", "operator": "Equal", "value": "ml"}, Taint("team", "NoSchedule", "ml"), True),
        ({"key": "team", "operator": "Equal", "value": "cv"}, Taint("team", "NoSchedule", "ml"), False),
        ({"key": "team", "operator": "Exists", "effect": "NoExecute"}, Taint("team", "NoSchedule"), False),
        ({"key": "team"}, Taint("team", "NoSchedule"), True),  # Equal with empty value matches a value-less taint
    ],
)
def test_tolerations_match_as_kubernetes_does(toleration: dict[str, str], taint: Taint, ok: bool) -> None:
    assert tolerates((tol(toleration),), taint) is ok


def test_value_sets_intersect_ins_less_notins_and_count_min_values() -> None:
    values = values_for(
        [req(ITYPE, "In", "a", "b", "c", minValues=2), req(ITYPE, "In", "b", "c"), req(ITYPE, "NotIn", "c")], ITYPE
    )
    assert values.only == ("b",)
    assert values.min_values == 2
    assert not values.room_without("b")


def test_one_requirement_per_key_is_the_same_set_of_values() -> None:
    # Given the pool's types, a pod's narrower In, the steering's NotIn, a zone NotIn alone, an Exists
    # beside an In, and a Gt (not a set of values: left as written)
    given = [
        req(ITYPE, "In", "a", "b", "c", minValues=1),
        req(ZONE, "NotIn", "z1"),
        req(ITYPE, "In", "b", "c"),
        req(CAP, "Exists"),
        req(ITYPE, "NotIn", "c"),
        req(ZONE, "NotIn", "z2"),
        req(CAP, "In", "spot"),
        req("gen", "Gt", "4"),
        req("gen", "Lt", "9"),
    ]
    # When merged, Then one per key, in the order of first appearance, each allowing what all allowed
    assert one_per_key(given) == [
        req(ITYPE, "In", "b", minValues=1),
        req(ZONE, "NotIn", "z1", "z2"),
        req(CAP, "In", "spot"),
        req("gen", "Gt", "4"),
        req("gen", "Lt", "9"),
    ]
    for key in (ITYPE, ZONE, CAP):
        merged, written = values_for(one_per_key(given), key), values_for(given, key)
        assert (merged.only, merged.min_values) == (written.only, written.min_values)
        assert all(merged.allows(v) == written.allows(v) for v in ("a", "b", "c", "z1", "z2", "z3", "spot"))
    # and a key with one requirement is kept as it is
    assert one_per_key([req(ZONE, "In", "z1")]) == [req(ZONE, "In", "z1")]


def test_gang_zone_is_the_majority_with_ties_broken_by_name() -> None:
    assert gang_zone(["us-west-2c", "us-west-2a", "us-west-2c"]) == "us-west-2c"
    assert gang_zone(["us-west-2c", "us-west-2a"]) == "us-west-2a"
    assert gang_zone([]) is None


# ------------------------------------------------------------------------------ placement


def test_a_gang_in_the_interrupted_zone_keeps_zone_and_type_and_leaves_spot() -> None:
    # Given a spot rank whose gang runs in its own zone, us-west-2b
    placed = place(POOL, [GPU_TAINT], node(), [rank()], ["us-west-2b"] * 3)
    # Then the zone is pinned and the interrupted pool is left by capacity type, not by GPU type
    assert placed.requirements[-2:] == [req(ZONE, "In", "us-west-2b"), req(CAP, "In", "on-demand")]
    assert "the gang's zone us-west-2b" in placed.reasons


def test_a_gang_pool_without_on_demand_changes_instance_type_but_keeps_the_gpu_name() -> None:
    # Given a spot-only NodePool and a node Karpenter labelled with its GPU's name
    pool = [req(ITYPE, "In", "p4d.24xlarge", "p4de.24xlarge"), req(CAP, "In", "spot")]
    placed = place(pool, [GPU_TAINT], node(**{GPU_NAME: "a100"}), [rank()], ["us-west-2b"])
    # Then the replacement stays in the zone on an A100, another instance type
    assert req(ZONE, "In", "us-west-2b") in placed.requirements
    assert req(GPU_NAME, "In", "a100") in placed.requirements
    assert placed.requirements[-1] == req(ITYPE, "NotIn", "p4d.24xlarge")


def test_a_gang_zone_that_leaves_only_the_interrupted_pool_gives_way_to_another_zone() -> None:
    # Given a NodePool pinned to one type and spot: in the gang's zone only the interrupted pool is left
    pool = [req(ITYPE, "In", "p4d.24xlarge"), req(CAP, "In", "spot")]
    placed = place(pool, [GPU_TAINT], node(), [rank()], ["us-west-2b"])
    # Then the steering stays: another zone, said so
    assert placed.requirements[-1] == req(ZONE, "NotIn", "us-west-2b")
    assert any("leaves only the interrupted pool" in r for r in placed.reasons)


def test_a_gang_zone_the_pods_rule_out_is_not_pinned() -> None:
    # Given ranks that require us-west-2a or us-west-2b, and a gang mostly in us-west-2c
    pod = rank(required_node_affinity=terms_of((req(ZONE, "In", "us-west-2a", "us-west-2b"),)))
    placed = place(POOL, [GPU_TAINT], node(), [pod], ["us-west-2c", "us-west-2c"])
    # Then the pods' requirement holds and the gang's zone is not forced on them
    assert req(ZONE, "In", "us-west-2c") not in placed.requirements
    assert req(ZONE, "In", "us-west-2a", "us-west-2b") in placed.requirements
    assert any("rule out the gang's zone us-west-2c" in r for r in placed.reasons)


def test_a_zone_with_min_values_is_not_pinned_to_one() -> None:
    pool = [*POOL[:2], req(ZONE, "In", "us-west-2a", "us-west-2b", "us-west-2c", minValues=2)]
    placed = place(pool, [GPU_TAINT], node(), [rank()], ["us-west-2b"])
    assert req(ZONE, "In", "us-west-2b") not in placed.requirements


def test_steering_respects_min_values_on_instance_types() -> None:
    # Given a NodePool that wants at least two instance types to choose from, and has only two
    pool = [req(ITYPE, "In", "p4d.24xlarge", "p5.48xlarge", minValues=2), req(CAP, "In", "spot", "on-demand")]
    placed = place(pool, [GPU_TAINT], node(), [rank()])
    # Then excluding one would break minValues: the zone is avoided instead
    assert placed.requirements[-1] == req(ZONE, "NotIn", "us-west-2b")


def test_pods_whose_requirements_the_nodepool_cannot_meet_get_no_nodeclaim() -> None:
    pod = rank(node_selector={ITYPE: "g6e.12xlarge"})
    with pytest.raises(NoFittingReplacement, match=r"no value of node\.kubernetes\.io/instance-type"):
        place(POOL, [GPU_TAINT], node(), [pod])


def test_a_pod_that_does_not_tolerate_a_taint_is_not_sized_for() -> None:
    # Given one GPU pod that tolerates the NodePool's taints and one that does not
    other = rank("intruder", tolerations=())
    placed = place(POOL, [GPU_TAINT], node(), [rank(), other])
    # Then the NodeClaim is sized for the first, and the reason names the other
    assert [p.name for p in placed.pods] == ["rank-1"]
    assert any("ml/intruder does not tolerate" in r for r in placed.reasons)
    # And with no tolerating GPU pod, there is no replacement at all
    with pytest.raises(NoFittingReplacement, match=r"nvidia\.com/gpu"):
        place(POOL, [GPU_TAINT], node(), [other])


def test_the_manifest_carries_the_placement_and_the_gpus_of_the_pods_it_is_for() -> None:
    nodepool = {
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                    "requirements": POOL,
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                }
            }
        },
    }
    manifest, why = nodeclaim_manifest(nodepool, node(), [rank(node_selector={"team": "ml"})], "evt", ["us-west-2b"])
    assert req("team", "In", "ml") in manifest["spec"]["requirements"]
    assert manifest["spec"]["resources"] == {"requests": {"nvidia.com/gpu": "8", "pods": "1"}}
    assert why.startswith("the gang's zone us-west-2b")
