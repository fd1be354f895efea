"""SelfSubjectAccessReview as a real API server answers it, and requests refused the same way."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim import KubeSim


def review(sim: KubeSim, **attrs: Any) -> Any:
    api = client.AuthorizationV1Api(sim.api_client())
    body = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(**attrs))
    )
    return api.create_self_subject_access_review(body).status


def test_everything_is_allowed_until_a_test_denies_it(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    assert review(sim, verb="patch", resource="nodes").allowed is True
    # When patch on nodes is denied
    sim.authorizer.deny("patch", "nodes")
    # Then the review says so and the request itself is refused with the server's 403
    assert review(sim, verb="patch", resource="nodes").allowed is False
    assert review(sim, verb="get", resource="nodes").allowed is True
    with pytest.raises(ApiException) as refused:
        core.patch_node(node["metadata"]["name"], {"spec": {"unschedulable": True}})
    assert refused.value.status == 403
    assert "forbidden" in json.loads(refused.value.body or "{}")["message"]
    assert 'cannot patch resource "nodes" in API group ""' in json.loads(refused.value.body or "{}")["message"]


def test_restrict_to_an_rbac_role_answers_subresources_and_groups(sim: KubeSim) -> None:
    sim.authorizer.restrict_to(
        [
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["*"]},
        ]
    )
    assert review(sim, verb="create", resource="pods", subresource="eviction").allowed is True
    assert review(sim, verb="delete", resource="pods").allowed is False
    assert review(sim, verb="delete", group="karpenter.sh", resource="nodeclaims").allowed is True
    assert review(sim, verb="delete", group="karpenter.sh", resource="nodepools").allowed is False


def test_a_review_with_no_attributes_is_invalid(sim: KubeSim) -> None:
    api = client.AuthorizationV1Api(sim.api_client())
    body = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec())
    with pytest.raises(ApiException) as invalid:
        api.create_self_subject_access_review(body)
    assert invalid.value.status == 422
