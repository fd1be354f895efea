"""The simulator admits Karpenter's v1 objects as kube-apiserver does with Karpenter's CRDs:
defaults filled in, and 422 Invalid naming the field for what the schema or a CEL rule refuses."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim import KubeSim
from sim import builders as b

GROUP, VERSION = "karpenter.sh", "v1"
Edit = Callable[[dict[str, Any]], None]


@pytest.fixture
def custom(sim: KubeSim) -> Any:
    return client.CustomObjectsApi(sim.api_client())


def create(custom: Any, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
    return created


def refusal(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 422
    status: dict[str, Any] = json.loads(caught.value.body or "{}")
    assert status["reason"] == "Invalid"
    return status


def pool_with(edit: Edit, name: str = "bad") -> dict[str, Any]:
    pool = b.nodepool(name)
    edit(pool)
    return pool


def claim_with(edit: Edit) -> dict[str, Any]:
    claim = b.nodeclaim_for(b.gpu_node("gpu-a", "i-0aaa"), name="bad")
    del claim["status"]
    edit(claim)
    return claim


def _set(path: str, value: Any) -> Edit:
    def edit(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value

    return edit


_DELETE = object()
TEMPLATE = "spec.template.spec"

INVALID_NODEPOOLS = [
    (
        "budget nodes not a number",
        _set("spec.disruption.budgets", [{"nodes": "ten"}]),
        "spec.disruption.budgets[0].nodes",
    ),
    (
        "budget nodes over 100%",
        _set("spec.disruption.budgets", [{"nodes": "101%"}]),
        "spec.disruption.budgets[0].nodes",
    ),
    (
        "budget schedule without duration",
        _set("spec.disruption.budgets", [{"nodes": "0", "schedule": "0 9 * * *"}]),
        "spec.disruption.budgets",
    ),
    (
        "budget duration in seconds",
        _set("spec.disruption.budgets", [{"nodes": "0", "schedule": "0 9 * * *", "duration": "30s"}]),
        "spec.disruption.budgets[0].duration",
    ),
    (
        "budget schedule not cron",
        _set("spec.disruption.budgets", [{"nodes": "0", "schedule": "daily", "duration": "1h"}]),
        "spec.disruption.budgets[0].schedule",
    ),
    (
        "budget reason unknown",
        _set("spec.disruption.budgets", [{"nodes": "1", "reasons": ["Expired"]}]),
        "spec.disruption.budgets[0].reasons[0]",
    ),
    ("more than 50 budgets", _set("spec.disruption.budgets", [{"nodes": "1"}] * 51), "spec.disruption.budgets"),
    ("GPU limit on a static pool", _set("spec.replicas", 2), "spec"),
    ("weight on a static pool", lambda p: p["spec"].update(replicas=1, limits={"nodes": "4"}, weight=10), "spec"),
    (
        "GPU limit not a quantity",
        lambda p: p["spec"]["limits"].update({"nvidia.com/gpu": "lots"}),
        "spec.limits[nvidia.com/gpu]",
    ),
    ("consolidation policy unknown", _set("spec.disruption.consolidationPolicy", "Never"), None),
    ("nodeClassRef missing", _set(f"{TEMPLATE}.nodeClassRef", _DELETE), f"{TEMPLATE}.nodeClassRef"),
    ("nodeClassRef without group", _set(f"{TEMPLATE}.nodeClassRef.group", _DELETE), f"{TEMPLATE}.nodeClassRef.group"),
    ("nodeClassRef with empty kind", _set(f"{TEMPLATE}.nodeClassRef.kind", ""), f"{TEMPLATE}.nodeClassRef.kind"),
    ("requirement operator unknown", _set(f"{TEMPLATE}.requirements.0.operator", "Is"), None),
    ("requirement In without values", _set(f"{TEMPLATE}.requirements.0.values", []), f"{TEMPLATE}.requirements"),
    (
        "requirement Gt not an integer",
        _set(
            f"{TEMPLATE}.requirements",
            [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["x"]}],
        ),
        f"{TEMPLATE}.requirements",
    ),
    ("requirement on a restricted key", _set(f"{TEMPLATE}.requirements.0.key", "karpenter.sh/nodepool"), None),
    ("requirement on hostname", _set(f"{TEMPLATE}.requirements.0.key", "kubernetes.io/hostname"), None),
    ("template label in karpenter.sh", _set("spec.template.metadata.labels", {"karpenter.sh/team": "a"}), None),
    ("taint effect unknown", _set(f"{TEMPLATE}.taints", [{"key": "a", "effect": "Sometimes"}]), None),
    ("expireAfter unreadable", _set(f"{TEMPLATE}.expireAfter", "30 days"), f"{TEMPLATE}.expireAfter"),
    ("weight out of range", _set("spec.weight", 0), "spec.weight"),
    ("replicas not an integer", _set("spec.replicas", "two"), "spec.replicas"),
]


@pytest.mark.parametrize(("case", "edit", "field"), INVALID_NODEPOOLS, ids=[c[0] for c in INVALID_NODEPOOLS])
def test_an_invalid_nodepool_is_refused_with_422_naming_the_field(
    custom: Any, case: str, edit: Edit, field: str | None
) -> None:
    # Given a NodePool Karpenter's CRD refuses
    body = pool_with(edit)
    # When it is created over HTTP, Then the answer is 422 Invalid with the field named
    status = refusal(lambda: create(custom, "nodepools", body))
    fields = [c["field"] for c in status["details"]["causes"]]
    assert status["details"]["kind"] == "NodePool"
    assert status["details"]["group"] == "karpenter.sh"
    assert field is None or field in fields, fields
    assert status["message"].startswith('NodePool.karpenter.sh "bad" is invalid: ')


def test_the_cel_messages_are_karpenters(custom: Any) -> None:
    static = refusal(lambda: create(custom, "nodepools", pool_with(_set("spec.replicas", 2))))
    assert static["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: \"object\": only 'limits.nodes' is supported on static NodePools",
            "field": "spec",
        }
    ]
    nodes = refusal(lambda: create(custom, "nodepools", pool_with(_set("spec.disruption.budgets", [{"nodes": "ten"}]))))
    assert nodes["details"]["causes"][0]["message"] == (
        "Invalid value: \"ten\": spec.disruption.budgets[0].nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'"
    )


INVALID_NODECLAIMS = [
    ("nodeClassRef missing", _set("spec.nodeClassRef", _DELETE), "spec.nodeClassRef"),
    ("nodeClassRef without name", _set("spec.nodeClassRef.name", _DELETE), "spec.nodeClassRef.name"),
    ("requirements missing", _set("spec.requirements", _DELETE), "spec.requirements"),
    ("requirement operator unknown", _set("spec.requirements.0.operator", "Matches"), "spec.requirements[0].operator"),
    ("resource request not a quantity", _set("spec.resources.requests.cpu", "four"), "spec.resources.requests[cpu]"),
]


@pytest.mark.parametrize(("case", "edit", "field"), INVALID_NODECLAIMS, ids=[c[0] for c in INVALID_NODECLAIMS])
def test_an_invalid_nodeclaim_is_refused_with_422_naming_the_field(
    custom: Any, case: str, edit: Edit, field: str
) -> None:
    status = refusal(lambda: create(custom, "nodeclaims", claim_with(edit)))
    assert field in [c["field"] for c in status["details"]["causes"]]


def test_a_patch_is_admitted_after_it_is_applied(custom: Any) -> None:
    # Given a valid NodePool
    create(custom, "nodepools", b.nodepool("pool"))
    # When a merge patch makes it a static pool that still carries a GPU limit, Then it is refused
    refusal(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "pool", {"spec": {"replicas": 1}}))
    # And a budget with a schedule but no duration is refused too
    patch = {"spec": {"disruption": {"budgets": [{"nodes": "0", "schedule": "0 9 * * *"}]}}}
    refusal(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "pool", patch))
    # And a valid patch goes through
    patch = {"spec": {"disruption": {"budgets": [{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}]}}}
    custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "pool", patch)


def test_transition_rules_compare_with_the_stored_object(custom: Any, sim: KubeSim) -> None:
    # A NodePool cannot switch between static and dynamic, nor change its nodeClassRef's kind
    static = b.nodepool("static", gpu_limit=None)
    static["spec"]["replicas"] = 2
    del static["spec"]["limits"]
    create(custom, "nodepools", static)
    patch: dict[str, Any] = {"spec": {"replicas": None}}
    refusal(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "static", patch))
    patch = {"spec": {"template": {"spec": {"nodeClassRef": {"kind": "OtherNodeClass"}}}}}
    refusal(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "static", patch))
    # A NodeClaim's spec is immutable; its labels are not
    create(custom, "nodeclaims", claim_with(lambda c: None))
    patch = {"spec": {"expireAfter": "1h"}}
    refusal(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "nodeclaims", "bad", patch))
    custom.patch_cluster_custom_object(GROUP, VERSION, "nodeclaims", "bad", {"metadata": {"labels": {"a": "b"}}})


def test_defaults_are_filled_in_as_the_api_server_stores_them(custom: Any) -> None:
    # Given a NodePool that leaves out everything with a default
    pool = b.nodepool("bare")
    del pool["spec"]["disruption"]
    del pool["spec"]["template"]["spec"]["expireAfter"]
    # When it is created, Then Karpenter's CRD defaults are stored
    created = create(custom, "nodepools", pool)
    assert created["spec"]["disruption"] == {
        "budgets": [{"nodes": "10%"}],
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
    }
    assert created["spec"]["template"]["spec"]["expireAfter"] == "720h"
    # And a budget without nodes gets 10%
    patch = {"spec": {"disruption": {"budgets": [{"schedule": "0 0 * * *", "duration": "1h"}]}}}
    patched = custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", "bare", patch)
    assert patched["spec"]["disruption"]["budgets"] == [{"schedule": "0 0 * * *", "duration": "1h", "nodes": "10%"}]


def test_the_builders_make_objects_karpenter_accepts(custom: Any) -> None:
    create(custom, "nodepools", b.nodepool("gpu-training"))
    claim = copy.deepcopy(b.nodeclaim_for(b.gpu_node("gpu-a", "i-0aaa")))
    create(custom, "nodeclaims", claim)


def test_kubectl_sees_the_same_refusal(sim: KubeSim, tmp_path: Any) -> None:
    import subprocess

    manifest = tmp_path / "pool.json"
    manifest.write_text(json.dumps(pool_with(_set("spec.disruption.budgets", [{"nodes": "ten"}]))))
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(sim.kubeconfig_path), "create", "--validate=false", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert 'The NodePool "bad" is invalid: spec.disruption.budgets[0].nodes: Invalid value: "ten"' in done.stderr


def test_gpuwardens_placed_nodeclaim_with_every_pod_operator_is_admitted(custom: Any) -> None:
    # Given a rank whose required affinity uses every operator a pod may, a nodeSelector on its
    # hostname (restricted in a NodeClaim) and a gang in us-west-2b
    from gpuwarden.domain.replacement import nodeclaim_manifest
    from gpuwarden.domain.views import node_from_json, pod_from_json

    gpu_count = "karpenter.k8s.aws/instance-gpu-count"
    terms = [
        {"key": gpu_count, "operator": "Gt", "values": ["4"]},
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "Exists"},
        {"key": "example.com/retired", "operator": "DoesNotExist"},
        {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["p3.16xlarge"]},
    ]
    node = b.gpu_node("gpu-a", "i-0aaa", zone="us-west-2b")
    node["metadata"]["labels"] |= {gpu_count: "8", "karpenter.k8s.aws/instance-gpu-name": "a100"}
    rank = b.training_pod("rank-1", node)
    rank["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-a"}
    rank["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": terms}]}
        }
    }
    # When gpuwarden builds the replacement NodeClaim
    manifest, _ = nodeclaim_manifest(
        b.nodepool("gpu-training"), node_from_json(node), [pod_from_json(rank)], "evt-1", ["us-west-2b"]
    )
    # Then Karpenter's CRD admits it as it is
    created = create(custom, "nodeclaims", manifest)
    assert {"key": gpu_count, "operator": "Gt", "values": ["4"]} in created["spec"]["requirements"]
    assert all(r["key"] != "kubernetes.io/hostname" for r in created["spec"]["requirements"])
