"""Replacement choice, spot steering and the NodeClaim manifest; node plans per kind; JSON views."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.domain.budgets import voluntary_verdict
from gpuwarden.domain.decide import NodePlan
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Policy, ReplacementPolicy, section_of
from gpuwarden.domain.replacement import choose_replacement, nodeclaim_manifest, nodeclaim_name, steering
from gpuwarden.domain.views import NodeView, PodView, Toleration, node_from_json, pod_from_json
from gpuwarden.domain.windows import Allowance
from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from gpuwarden.kinds.registry import POLICY, SPECS, spec_of

ITYPE, ZONE, CAP = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type"


def node(capacity: str = "spot", nodepool: str | None = "gpu-training", **annotations: str) -> NodeView:
    labels = {ITYPE: "p4d.24xlarge", CAP: capacity}
    if nodepool:
        labels["karpenter.sh/nodepool"] = nodepool
    return NodeView(
        name="n1",
        resource_version="7",
        provider_id="aws:///us-west-2a/i-0abc1234def567890",
        labels=labels,
        annotations=annotations,
    )


def req(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


# ------------------------------------------------------------------------------ choice


def test_karpenter_node_gets_a_nodeclaim_even_in_an_asg() -> None:
    choice = choose_replacement(node(), "some-asg", ReplacementPolicy())
    assert (choice.strategy, choice.target) == ("nodeclaim", "gpu-training")


def test_asg_member_without_nodepool_raises_the_group() -> None:
    choice = choose_replacement(node(nodepool=None), "gpu-ng", ReplacementPolicy())
    assert (choice.strategy, choice.target) == ("asg", "gpu-ng")


def test_fleet_only_where_configured_and_none_otherwise() -> None:
    fleet = choose_replacement(node(nodepool=None), None, ReplacementPolicy(fleet_launch_template="lt-1"))
    none = choose_replacement(node(nodepool=None), None, ReplacementPolicy())
    off = choose_replacement(node(), "gpu-ng", ReplacementPolicy(enabled=False))
    assert (fleet.strategy, fleet.target) == ("fleet", "lt-1")
    assert none.strategy == "none"
    assert "no NodePool" in none.reason
    assert (off.strategy, off.reason) == ("none", "replacement disabled by policy")


# ------------------------------------------------------------------------------ steering


def test_spot_replacement_avoids_the_interrupted_instance_type_first() -> None:
    extra, why = steering(node(), [req(ITYPE, "p4d.24xlarge", "p5.48xlarge")])
    assert extra == [{"key": ITYPE, "operator": "NotIn", "values": ["p4d.24xlarge"]}]
    assert why == f"avoid {ITYPE}=p4d.24xlarge"


def test_pool_with_one_instance_type_avoids_the_zone_instead() -> None:
    extra, _ = steering(node(), [req(ITYPE, "p4d.24xlarge"), req(ZONE, "us-west-2a", "us-west-2b")])
    assert extra == [{"key": ZONE, "operator": "NotIn", "values": ["us-west-2a"]}]


def test_pool_pinned_to_type_and_zone_falls_back_to_on_demand() -> None:
    extra, why = steering(node(), [req(ITYPE, "p4d.24xlarge"), req(ZONE, "us-west-2a"), req(CAP, "spot", "on-demand")])
    assert extra == [{"key": CAP, "operator": "In", "values": ["on-demand"]}]
    assert why == "fall back to on-demand"


def test_pool_allowing_only_the_interrupted_pool_adds_nothing() -> None:
    extra, why = steering(node(), [req(ITYPE, "p4d.24xlarge"), req(ZONE, "us-west-2a"), req(CAP, "spot")])
    assert extra == []
    assert "only the interrupted pool" in why


def test_on_demand_node_is_not_steered() -> None:
    assert steering(node(capacity="on-demand"), []) == ([], "not spot: no capacity pool to avoid")


# ------------------------------------------------------------------------------ manifest


NODEPOOL = {
    "metadata": {"name": "gpu-training"},
    "spec": {
        "template": {
            "metadata": {"labels": {"team": "ml"}, "annotations": {"owner": "ml-infra"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                "requirements": [req(ITYPE, "p4d.24xlarge", "p5.48xlarge"), req(CAP, "spot", "on-demand")],
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
        },
        "limits": {"nvidia.com/gpu": "64"},
    },
}


GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule")


def gpu_pod(name: str, gpus: int, **fields: Any) -> PodView:
    """A pod on a GPU node: it tolerates the NodePool's GPU taint (the scheduler put it there)."""
    fields.setdefault("tolerations", (GPU_TOLERATION,))
    return PodView("ml", name, name, "n1", fields.pop("phase", "Running"), gpu_request=gpus, **fields)


def test_nodeclaim_copies_the_template_steers_and_sizes_for_the_gpu_pods() -> None:
    # Given two GPU pods moving (a DaemonSet pod and a finished pod do not move)
    pods = [
        gpu_pod("a", 4),
        gpu_pod("b", 2),
        gpu_pod("ds", 1, owner_kind="DaemonSet"),
        gpu_pod("done", 8, phase="Succeeded"),
    ]
    # When the NodeClaim is built from the NodePool
    manifest, why = nodeclaim_manifest(NODEPOOL, node(), pods, "evt-1")
    # Then it is a karpenter.sh/v1 NodeClaim named from the event, from the template, for 6 GPUs
    assert manifest["apiVersion"] == "karpenter.sh/v1"
    assert manifest["kind"] == "NodeClaim"
    assert manifest["metadata"]["name"] == nodeclaim_name("evt-1", "n1")
    assert manifest["metadata"]["labels"] == {"team": "ml", "karpenter.sh/nodepool": "gpu-training"}
    assert manifest["metadata"]["annotations"] == {
        "owner": "ml-infra",
        "gpuwarden.io/launched-for": "evt-1",
        "gpuwarden.io/replaces": "n1",
    }
    spec = manifest["spec"]
    assert spec["nodeClassRef"]["name"] == "gpu"
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert spec["expireAfter"] == "720h"
    assert spec["resources"] == {"requests": {"nvidia.com/gpu": "6", "pods": "2"}}
    # one requirement per key: the pool's instance types less the interrupted one (a provider may
    # read only the first requirement on a key: docs/realplane.md, "Findings")
    assert [r for r in spec["requirements"] if r["key"] == ITYPE] == [
        {"key": ITYPE, "operator": "In", "values": ["p5.48xlarge"]}
    ]
    assert len({r["key"] for r in spec["requirements"]}) == len(spec["requirements"])
    assert why.startswith("avoid")
    assert "limits" not in spec


def test_nodeclaim_name_is_deterministic_per_event_and_node() -> None:
    assert nodeclaim_name("e", "n1") == nodeclaim_name("e", "n1")
    assert nodeclaim_name("e", "n1") != nodeclaim_name("e", "n2")
    assert nodeclaim_name("e", "n1") != nodeclaim_name("f", "n1")
    assert len(nodeclaim_name("e", "n1")) <= 63


# ------------------------------------------------------------------------------ decide


def plan_interruption(
    kind: Kind, node: NodeView, pods: list[PodView], policy: Policy, allowance: Allowance
) -> NodePlan:
    """The kind's own plan, as its spec names it (the windows' answer, no NodePool budget)."""
    return spec_of(kind).hooks.admission.plan(node, pods, policy, lambda: voluntary_verdict(allowance, None))


ANY = Allowance(allowed=None, window=None, reason="no budget windows configured")
FROZEN = Allowance(allowed=0, window="freeze", reason="window 'freeze' freezes voluntary disruption")


@pytest.mark.parametrize(
    ("kind", "policy", "allowance", "steps"),
    [
        (Kind.SPOT_INTERRUPTION, Policy(cluster="c"), FROZEN, (True, True, True)),
        (Kind.INSTANCE_STOPPING, Policy(cluster="c"), ANY, (False, False, False)),
        (Kind.REBALANCE, Policy(cluster="c"), ANY, (True, True, False)),
        (
            Kind.REBALANCE,
            POLICY.model_validate({"cluster": "c", "rebalance": {"action": "drain"}}),
            ANY,
            (True, True, True),
        ),
        (
            Kind.SPOT_INTERRUPTION,
            Policy(cluster="c", replacement=ReplacementPolicy(enabled=False)),
            ANY,
            (True, False, True),
        ),
    ],
)
def test_plan_per_kind(kind: Kind, policy: Policy, allowance: Allowance, steps: tuple[bool, ...]) -> None:
    plan = plan_interruption(kind, node(), [], policy, allowance)
    assert (plan.checkpoint, plan.replace, plan.drain) == steps
    assert plan.reason
    assert plan.refused is None


def test_rebalance_drain_is_refused_by_a_freezing_window_or_do_not_disrupt() -> None:
    policy = POLICY.model_validate({"cluster": "c", "rebalance": {"action": "drain"}})
    frozen = plan_interruption(Kind.REBALANCE, node(), [], policy, FROZEN)
    pinned_pod = PodView("ml", "w", "u", "n1", "Running", annotations={"karpenter.sh/do-not-disrupt": "true"})
    held = plan_interruption(Kind.REBALANCE, node(), [pinned_pod], policy, ANY)
    pinned_node = plan_interruption(Kind.REBALANCE, node(**{"karpenter.sh/do-not-disrupt": "true"}), [], policy, ANY)
    assert (frozen.drain, frozen.refused) == (False, FROZEN.reason)
    assert (held.drain, held.refused) == (False, "pod ml/w carries karpenter.sh/do-not-disrupt")
    assert (pinned_node.drain, pinned_node.refused) == (False, "node n1 carries karpenter.sh/do-not-disrupt")
    assert (frozen.replace, frozen.checkpoint) == (True, True)


def test_when_a_window_and_do_not_disrupt_both_refuse_the_reason_names_the_window() -> None:
    # Given a rebalance drain that a freezing window and a do-not-disrupt node would both refuse
    policy = POLICY.model_validate({"cluster": "c", "rebalance": {"action": "drain"}})
    pinned = node(**{"karpenter.sh/do-not-disrupt": "true"})
    # When it is planned, Then the refusal is the window's
    plan = plan_interruption(Kind.REBALANCE, pinned, [], policy, FROZEN)
    assert (plan.drain, plan.refused) == (False, FROZEN.reason)


def test_gpu_idle_lets_an_idle_pool_go_to_zero_by_default() -> None:
    assert section_of(POLICY(cluster="c"), GpuIdlePolicy).min_nodes_per_nodepool == 0


def test_spot_interruption_ignores_do_not_disrupt() -> None:
    plan = plan_interruption(
        Kind.SPOT_INTERRUPTION, node(**{"karpenter.sh/do-not-disrupt": "true"}), [], Policy(cluster="c"), FROZEN
    )
    assert plan.drain
    assert plan.refused is None


def test_every_kind_that_disrupts_a_node_plans_it_with_a_reason() -> None:
    # Given every kind whose notices run the one sequence (a plan of its own in its spec)
    for spec in SPECS:
        if spec.handle is None or spec.kind is Kind.INSTANCE_STOPPING:
            continue
        # When its plan is asked, Then it checkpoints (so cordons) and says why
        plan = spec.hooks.admission.plan(node(), [], Policy(cluster="c"), lambda: voluntary_verdict(ANY, None))
        assert plan.checkpoint, spec.kind
        assert plan.reason, spec.kind


# ------------------------------------------------------------------------------ views


@pytest.mark.parametrize(
    ("provider_id", "instance", "zone"),
    [
        ("aws:///us-west-2a/i-0abc1234def567890", "i-0abc1234def567890", "us-west-2a"),
        ("aws:///us-east-1b/i-0123abcd", "i-0123abcd", "us-east-1b"),
        ("aws:///us-west-2a/i-0ABC", None, "us-west-2z"),
        ("kind://docker/kind/kind-worker", None, "us-west-2z"),
        (None, None, "us-west-2z"),
    ],
)
def test_provider_id_gives_instance_and_zone(provider_id: str | None, instance: str | None, zone: str) -> None:
    obj = {
        "metadata": {"name": "n1", "resourceVersion": "3", "labels": {ZONE: "us-west-2z"}},
        "spec": {"providerID": provider_id} if provider_id else {},
    }
    view = node_from_json(obj)
    assert (view.instance_id, view.zone) == (instance, zone)


def test_node_json_quantities_taints_and_addresses() -> None:
    view = node_from_json(
        {
            "metadata": {"name": "n1", "resourceVersion": 12},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            },
        }
    )
    assert (view.resource_version, view.gpu_capacity, view.unschedulable) == ("12", 8, True)
    assert view.taints[0].as_dict() == {"key": "k", "effect": "NoSchedule"}
    assert view.addresses == ("10.0.0.1",)
    assert (
        node_from_json({"metadata": {"name": "x"}, "status": {"capacity": {"nvidia.com/gpu": "1k"}}}).gpu_capacity == 0
    )


def test_pod_json_owner_grace_gpu_requests_and_deletion() -> None:
    view = pod_from_json(
        {
            "metadata": {
                "name": "w",
                "namespace": "ml",
                "uid": "u",
                "deletionTimestamp": "2026-06-01T14:03:00Z",
                "ownerReferences": [
                    {"kind": "Workflow", "name": "wf", "controller": False},
                    {"kind": "Job", "name": "train", "controller": True},
                ],
            },
            "spec": {
                "nodeName": "n1",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
                    {"name": "b", "resources": {"requests": {"nvidia.com/gpu": 2}}},
                    {"name": "c"},
                ],
            },
            "status": {"phase": "Running", "podIP": "10.0.0.9"},
        }
    )
    assert (view.owner_kind, view.owner_name) == ("Job", "train")
    assert view.grace_seconds == 0
    assert view.gpu_request == 6
    assert view.containers == ("a", "b", "c")
    assert view.terminating
    assert view.pod_ip == "10.0.0.9"
    assert pod_from_json({"metadata": {"name": "x"}}).grace_seconds == 30
