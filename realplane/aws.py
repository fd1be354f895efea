"""moto as the EC2 the real plane's KWOK nodes would run in (the e2e scenes, `gpuwarden demo --real`).

Karpenter's KWOK provider names a node ``kwok-<nodeclaim>-…`` with providerID ``kwok://<name>``,
so nothing in the node says which instance it is; gpuwarden finds a node without an AWS providerID
by the instance's ``PrivateDnsName`` (as EKS names nodes). `AwsWorld.instance_for_node` launches
the instance and has moto report the node's name as its ``PrivateDnsName``, as EC2 would for the
node's real instance (docs/realplane.md, "Findings").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account


@dataclass
class AwsWorld:
    """moto, in this process, as the EC2 the plane's nodes would run in: its server at ``endpoint``,
    or "" under `moto.mock_aws` (boto3's calls intercepted: no endpoint)."""

    endpoint: str

    def ec2(self) -> Any:
        import boto3

        return boto3.client(
            "ec2",
            endpoint_url=self.endpoint or None,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",  # noqa: S106 - moto takes any
        )

    def instance_for_node(self, node: dict[str, Any]) -> str:
        """Launch the EC2 instance behind a KWOK node (its type and zone) and return its id; moto
        reports the node's name as its ``PrivateDnsName`` (see the module's docstring)."""
        from moto.backends import get_backend

        labels = node["metadata"]["labels"]
        ec2 = self.ec2()
        image = ec2.describe_images()["Images"][0]["ImageId"]
        launched = ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType=labels.get("node.kubernetes.io/instance-type", "p4d.24xlarge"),
            Placement={"AvailabilityZone": labels.get("topology.kubernetes.io/zone", f"{REGION}a")},
        )
        instance_id: str = launched["Instances"][0]["InstanceId"]
        instance = get_backend("ec2")[ACCOUNT][REGION].get_instance(instance_id)
        name = node["metadata"]["name"]
        instance.__class__ = type(
            "KwokNodeInstance", (type(instance),), {"private_dns_name": property(lambda _self: name)}
        )
        return instance_id


@contextmanager
def start_moto() -> Iterator[AwsWorld]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per AWS call on a user's terminal
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield AwsWorld(endpoint=f"http://127.0.0.1:{server.get_host_and_port()[1]}")
    finally:
        server.stop()
