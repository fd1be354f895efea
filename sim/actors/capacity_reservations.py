"""EC2 Capacity Reservations, which moto (5.2) does not implement: ``DescribeCapacityReservations``
is answered here, and only it, at the boto3 boundary of gpuwarden's EC2 client; every other EC2
call still goes to moto. The answer has the shape of the EC2 API reference
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityReservations.html,
``CapacityReservation``): a Capacity Block is ``ReservationType: capacity-block``,
``InstanceMatchCriteria: targeted``, ``EndDateType: limited``, with its ``EndDate``.

Used by the demo and the tests; not shipped to Lambda.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

OPERATION = "before-call.ec2.DescribeCapacityReservations"


@dataclass
class Block:
    reservation_id: str
    end: datetime
    instance_type: str = "p5.48xlarge"
    zone: str = "us-west-2a"
    count: int = 2
    state: str = "active"

    def as_api(self, account: str, region: str) -> dict[str, Any]:
        start = self.end - timedelta(days=1)
        return {
            "CapacityReservationId": self.reservation_id,
            "OwnerId": account,
            "CapacityReservationArn": f"arn:aws:ec2:{region}:{account}:capacity-reservation/{self.reservation_id}",
            "AvailabilityZoneId": "usw2-az1",
            "InstanceType": self.instance_type,
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": self.zone,
            "Tenancy": "default",
            "TotalInstanceCount": self.count,
            "AvailableInstanceCount": 0,
            "EbsOptimized": True,
            "EphemeralStorage": False,
            "State": self.state,
            "StartDate": start,
            "EndDate": self.end,
            "EndDateType": "limited",
            "InstanceMatchCriteria": "targeted",
            "CreateDate": start - timedelta(days=2),
            "Tags": [],
            "ReservationType": "capacity-block",
        }


@dataclass
class CapacityReservations:
    """The account's Capacity Blocks, answered to DescribeCapacityReservations on the clients it is attached to."""

    account: str = "123456789012"
    region: str = "us-west-2"
    blocks: dict[str, Block] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)

    def add(self, block: Block) -> Block:
        self.blocks[block.reservation_id] = block
        return block

    def attach(self, ec2_client: Any) -> None:
        ec2_client.meta.events.register(OPERATION, self._answer)

    def _answer(self, params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import ClientError

        asked = list(params.get("CapacityReservationIds") or self.blocks)
        self.calls.append(asked)
        missing = [r for r in asked if r not in self.blocks]
        if missing:
            error = {"Code": "InvalidCapacityReservationId.NotFound", "Message": f"{missing[0]} not found"}
            raise ClientError({"Error": error}, "DescribeCapacityReservations")
        found = [self.blocks[r].as_api(self.account, self.region) for r in asked]
        http = AWSResponse("https://ec2.amazonaws.com/", 200, {}, None)
        return http, {"CapacityReservations": found, "ResponseMetadata": {"HTTPStatusCode": 200}}
