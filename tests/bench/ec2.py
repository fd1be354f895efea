"""EC2 as the benchmarks' functions see it: a moto server in the benchmark's process whose
instances carry the tags Karpenter puts on its own (karpenter-provider-aws, cloudprovider.go
`getTags`), so a Spot warning finds its node as deployed: DescribeInstances, then one GET of the
node named by the instance's private DNS name (docs/events.md, "Finding the node")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CLUSTER = "ml-prod"  # bench_env's GPUWARDEN_CLUSTER


def karpenter_tags(cluster: str) -> list[dict[str, str]]:
    tags = {
        f"kubernetes.io/cluster/{cluster}": "owned",
        "eks:eks-cluster-name": cluster,
        "karpenter.sh/nodepool": "gpu-training",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    }
    return [{"Key": k, "Value": v} for k, v in tags.items()]


class Instances:
    """moto's EC2 at ``endpoint``: ``launch`` answers (instance id, PrivateDnsName) per instance."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self.ec2: Any = boto3.client(
            "ec2", endpoint_url=endpoint, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.image = self.ec2.describe_images()["Images"][0]["ImageId"]

    def launch(self, count: int, cluster: str = CLUSTER) -> list[tuple[str, str]]:
        made: list[tuple[str, str]] = []
        while len(made) < count:  # moto launches up to 1,000 per call, as EC2 does
            batch = min(count - len(made), 500)
            spec = [{"ResourceType": "instance", "Tags": karpenter_tags(cluster)}]
            found = self.ec2.run_instances(
                ImageId=self.image, MinCount=batch, MaxCount=batch, InstanceType="p4d.24xlarge", TagSpecifications=spec
            )["Instances"]
            made += [(i["InstanceId"], i["PrivateDnsName"]) for i in found]
        return made


@contextmanager
def ec2_world() -> Iterator[Instances]:
    """A moto server for the benchmark's children (``AWS_ENDPOINT_URL=world.endpoint``)."""
    from tests.bench.deployed import moto_server

    with moto_server() as endpoint:
        yield Instances(endpoint)
