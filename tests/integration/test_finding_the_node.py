"""Finding a warning's node without listing the cluster (docs/architecture.md, "Finding the node"):
EC2 DescribeInstances (moto) says whose the instance is and its private DNS name; the node is one
GET by that name; a paginated LIST is the fallback. The simulator over HTTP counts the requests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from gpuwarden.adapters import paging
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.engine import node_ops
from gpuwarden.services.engine.node_ops import find_node
from sim import KubeSim
from sim.builders import gpu_node
from tests.integration.conftest import World
from tests.integration.inputs import spot_warning


#: The tags Karpenter puts on every instance it launches (karpenter-provider-aws,
#: pkg/cloudprovider/cloudprovider.go `getTags`), for cluster ``name``.
def karpenter_tags(name: str) -> dict[str, str]:
    return {
        f"kubernetes.io/cluster/{name}": "owned",
        "eks:eks-cluster-name": name,
        "karpenter.sh/nodepool": "gpu-training",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    }


@pytest.fixture(autouse=True)
def _cold_process() -> Iterator[None]:
    """Each test is a fresh sandbox: nothing found before."""
    node_ops._INSTANCE_CACHE.clear()
    yield
    node_ops._INSTANCE_CACHE.clear()


def launch(tags: dict[str, str]) -> tuple[str, str]:
    """An instance in moto's EC2 with ``tags``: (its id, its PrivateDnsName)."""
    ec2 = boto3.client("ec2", region_name="us-west-2")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    launched = ec2.run_instances(
        ImageId=image, MinCount=1, MaxCount=1, InstanceType="p4d.24xlarge", TagSpecifications=spec
    )["Instances"][0]
    return launched["InstanceId"], launched["PrivateDnsName"]


def crowd(sim: KubeSim, count: int) -> None:
    for i in range(count):
        sim.create(gpu_node(f"ip-10-9-{i // 250}-{i % 250}.us-west-2.compute.internal", f"i-0c{i:015x}"))


def node_reads(sim: KubeSim, since: int) -> list[Any]:
    return [r for r in sim.requests[since:] if r.path.startswith("/api/v1/nodes")]


def test_a_warning_for_another_clusters_instance_touches_no_kubernetes_api(world: World) -> None:
    # Given 30 nodes of ml-prod, and an instance Karpenter launched for ml-staging in the same account
    crowd(world.sim, 30)
    instance, _ = launch(karpenter_tags("ml-staging"))
    before = len(world.sim.requests)
    # When its Spot warning reaches the ml-prod stack
    event = spot_warning(world, detail={"instance-id": instance, "instance-action": "terminate"})
    result = handle_batch(parse_notices(event), world.deps()).to_json()
    # Then it is ignored as not ml-prod's, and the API server was not asked anything
    assert result["outcome"] == "ignored", result
    assert "ml-prod" in result["reason"]
    assert world.sim.requests[before:] == []


def test_our_instance_is_one_get_by_its_dns_name_never_a_list(world: World) -> None:
    # Given 30 nodes and the warned instance's node, named as EKS names it (the instance's private DNS name)
    crowd(world.sim, 30)
    instance, dns = launch(karpenter_tags("ml-prod"))
    world.sim.create(gpu_node(dns, instance))
    before = len(world.sim.requests)
    # When it is looked up
    node = find_node(world.deps().kube, world.deps().cloud, instance, None, "ml-prod")
    # Then it is found with one GET of that node, no LIST
    assert node is not None
    assert node.name == dns
    assert [(r.method, r.path) for r in node_reads(world.sim, before)] == [("GET", f"/api/v1/nodes/{dns}")]


def test_a_node_of_that_name_for_another_instance_is_not_taken(world: World) -> None:
    # Given a node with the instance's DNS name whose providerID names another instance (a reused address)
    instance, dns = launch(karpenter_tags("ml-prod"))
    world.sim.create(gpu_node(dns, "i-0ddddddddddddddd0"))
    # When the instance is looked up, Then that node is not it (the LIST finds no node of the instance)
    assert find_node(world.deps().kube, world.deps().cloud, instance, None, "ml-prod") is None


def test_an_instance_ec2_cannot_place_is_found_by_a_paginated_list(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 5 nodes whose instances EC2 does not know (untagged, or gone), pages of 2
    monkeypatch.setattr(paging, "LIST_PAGE", 2)
    crowd(world.sim, 5)
    target = "i-0c000000000000003"
    before = len(world.sim.requests)
    # When the fourth one's instance is looked up
    node = find_node(world.deps().kube, world.deps().cloud, target, None, "ml-prod")
    # Then it is found by listing the nodes in 3 pages of at most 2, each asking for a limit
    assert node is not None
    assert node.instance_id == target
    lists = node_reads(world.sim, before)
    assert [r.query.get("limit") for r in lists] == [["2"], ["2"], ["2"]]
    assert "continue" not in lists[0].query
    assert all("continue" in r.query for r in lists[1:])
    # and a warm process finds it again with one GET
    again = len(world.sim.requests)
    assert find_node(world.deps().kube, world.deps().cloud, target, None, "ml-prod") == node
    assert [r.method for r in node_reads(world.sim, again)] == ["GET"]
    assert all("limit" not in r.query for r in node_reads(world.sim, again))
