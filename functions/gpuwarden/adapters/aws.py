"""EC2, Auto Scaling and EC2 Fleet through the AWS SDK (`adapters/sdk.py`: the standard chain)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

from gpuwarden.adapters.errors import aws_call, aws_error
from gpuwarden.domain.errors import ReplacementError
from gpuwarden.domain.gpu_idle import IdleMetric
from gpuwarden.domain.instances import InstanceIdentity
from gpuwarden.domain.ports import CapacityReservation
from gpuwarden.observability import logger

ASG_TAG = "aws:autoscaling:groupName"


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _reservation(item: dict[str, Any]) -> CapacityReservation:
    end = item.get("EndDate")
    return CapacityReservation(
        reservation_id=str(item.get("CapacityReservationId", "")),
        end=end if isinstance(end, datetime) else None,
        state=str(item.get("State", "")),
        reservation_type=str(item.get("ReservationType") or "default"),
    )


class Cloud:
    """The `CloudPort`: clients are made on first use (the SDK costs ~0.2 s to import)."""

    def __init__(self, region: str | None = None) -> None:
        self._region = region
        self._lock = threading.Lock()
        self._instances: dict[str, dict[str, Any]] = {}

    def _client(self, service: str, *, quick: bool = False) -> Any:
        from botocore.config import Config

        from gpuwarden.adapters.sdk import client

        if quick:  # a lookup with a fallback: a second of waiting at most, never the SDK's retries
            config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1, read_timeout=2)
        else:
            config = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=3, read_timeout=10)
        return client(service, self._region, config)

    @cached_property
    def ec2(self) -> Any:
        return self._client("ec2")

    @cached_property
    def ec2_lookup(self) -> Any:
        """EC2 for `instance_identity`: one attempt, short timeouts (the nodes' list is its fallback:
        an EC2 the function cannot reach costs a notice a second, not the SDK's 15 s of retries),
        on the EC2 model cut to DescribeInstances (`sdk.LOOKUP_SERVICE`: the whole one is most of a
        cold Spot warning's EC2 client)."""
        from gpuwarden.adapters.sdk import LOOKUP_SERVICE

        return self._client(LOOKUP_SERVICE, quick=True)

    @cached_property
    def autoscaling(self) -> Any:
        return self._client("autoscaling")

    @cached_property
    def cloudwatch(self) -> Any:
        return self._client("cloudwatch")

    def _instance(self, instance_id: str, *, quick: bool = False) -> dict[str, Any] | None:
        with self._lock:
            if instance_id in self._instances:
                return self._instances[instance_id]
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = (self.ec2_lookup if quick else self.ec2).describe_instances(InstanceIds=[instance_id])
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
                return None
            raise aws_error(err, f"EC2 DescribeInstances {instance_id}") from err
        except BotoCoreError as err:
            raise aws_error(err, f"EC2 DescribeInstances {instance_id}") from err
        found = [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]
        instance = found[0] if found else None
        if instance is not None:
            with self._lock:
                self._instances[instance_id] = instance
        return instance

    def instance_identity(self, instance_id: str) -> InstanceIdentity | None:
        instance = self._instance(instance_id, quick=True)
        if instance is None:
            return None
        tags = {str(t.get("Key")): str(t.get("Value", "")) for t in instance.get("Tags", [])}
        return InstanceIdentity(instance_id, instance.get("PrivateDnsName") or None, tags)

    def asg_of(self, instance_id: str) -> str | None:
        instance = self._instance(instance_id) or {}
        tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags", [])}
        return tags.get(ASG_TAG)

    def raise_asg_desired(self, group: str, token: str) -> str:
        """+1 desired capacity, within MaxSize. The caller guarantees once per node."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            groups = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
            found = groups.get("AutoScalingGroups", [])
            if not found:
                raise ReplacementError(f"Auto Scaling group {group} not found")
            desired, maximum = int(found[0]["DesiredCapacity"]), int(found[0]["MaxSize"])
            if desired >= maximum:
                raise ReplacementError(f"Auto Scaling group {group} is at MaxSize {maximum}")
            self.autoscaling.set_desired_capacity(
                AutoScalingGroupName=group, DesiredCapacity=desired + 1, HonorCooldown=False
            )
        except (BotoCoreError, ClientError) as err:
            raise aws_error(err, f"Auto Scaling group {group}", base=ReplacementError) from err
        logger.info("asg desired raised", extra={"group": group, "desired": desired + 1, "token": token})
        return f"asg/{group}"

    def terminate_in_asg(self, instance_id: str) -> None:
        with aws_call(f"Auto Scaling TerminateInstanceInAutoScalingGroup {instance_id}"):
            self.autoscaling.terminate_instance_in_auto_scaling_group(
                InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
            )

    def gpu_utilization(self, metric: IdleMetric, minutes: int, period_seconds: int) -> list[float]:
        """The re-checked GPU series (Average per period) over the last `minutes`, oldest first."""
        from datetime import UTC, datetime, timedelta

        end = datetime.now(UTC)
        query: dict[str, Any] = {
            "Id": "gpu",
            "MetricStat": {
                "Metric": {
                    "Namespace": metric.namespace,
                    "MetricName": metric.name,
                    "Dimensions": [{"Name": k, "Value": v} for k, v in metric.dimensions],
                },
                "Period": period_seconds,
                "Stat": "Average",
            },
            "ReturnData": True,
        }
        if metric.query is not None:  # a Metrics Insights alarm: its own query, narrowed to this node
            query = {"Id": "gpu", "Expression": metric.query, "Period": period_seconds, "ReturnData": True}
        where = ",".join(f"{k}={v}" for k, v in metric.dimensions)
        with aws_call(f"CloudWatch GetMetricData {metric.namespace} {metric.name} {where}"):
            answer = self.cloudwatch.get_metric_data(
                MetricDataQueries=[query],
                StartTime=end - timedelta(minutes=minutes),
                EndTime=end,
                ScanBy="TimestampAscending",
            )
        results = answer.get("MetricDataResults") or []
        return [float(v) for r in results for v in r.get("Values") or []]

    def capacity_reservations(self, reservation_ids: Sequence[str]) -> list[CapacityReservation]:
        """One DescribeCapacityReservations for the ids; ids EC2 does not know are left out."""
        from botocore.exceptions import BotoCoreError, ClientError

        call = f"EC2 DescribeCapacityReservations {', '.join(reservation_ids[:5])}"
        found: list[CapacityReservation] = []
        for chunk in _chunks(list(dict.fromkeys(reservation_ids)), 100):
            try:
                pages = self.ec2.get_paginator("describe_capacity_reservations").paginate(CapacityReservationIds=chunk)
                items = [r for page in pages for r in page.get("CapacityReservations", [])]
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") == "InvalidCapacityReservationId.NotFound":
                    items = [r for one in chunk for r in self._one_reservation(one)]
                else:
                    raise aws_error(err, call) from err
            except BotoCoreError as err:
                raise aws_error(err, call) from err
            found += [_reservation(item) for item in items]
        return found

    def _one_reservation(self, reservation_id: str) -> list[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError

        call = f"EC2 DescribeCapacityReservations {reservation_id}"
        try:
            answer = self.ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "InvalidCapacityReservationId.NotFound":
                return []
            raise aws_error(err, call) from err
        except BotoCoreError as err:
            raise aws_error(err, call) from err
        return list(answer.get("CapacityReservations", []))

    def reservations_of(self, instance_ids: Sequence[str]) -> dict[str, str]:
        """instance id → CapacityReservationId, from DescribeInstances (cached with the instance)."""
        found: dict[str, str] = {}
        for instance_id in instance_ids:
            reservation = (self._instance(instance_id) or {}).get("CapacityReservationId")
            if reservation:
                found[instance_id] = str(reservation)
        return found

    def launch_fleet(self, token: str, template: str, instance_types: Sequence[str], subnets: Sequence[str]) -> str:
        """EC2 Fleet `instant`: spot first over several types, on-demand when spot has none."""
        from botocore.exceptions import BotoCoreError, ClientError

        overrides = [
            {"InstanceType": t, **({"SubnetId": s} if s else {})}
            for t in instance_types or [""]
            for s in subnets or [""]
        ]
        overrides = [{k: v for k, v in o.items() if v} for o in overrides]
        spec = {"LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Default"}}
        if not template.startswith("lt-"):
            spec = {"LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Default"}}
        for capacity in ("spot", "on-demand"):
            try:
                answer = self.ec2.create_fleet(
                    ClientToken=f"{token}-{capacity}"[:64],
                    Type="instant",
                    LaunchTemplateConfigs=[{**spec, "Overrides": overrides}] if any(overrides) else [spec],
                    TargetCapacitySpecification={
                        "TotalTargetCapacity": 1,
                        "DefaultTargetCapacityType": capacity,
                    },
                    SpotOptions={"AllocationStrategy": "price-capacity-optimized"},
                    OnDemandOptions={"AllocationStrategy": "lowest-price"},
                )
            except (BotoCoreError, ClientError) as err:
                raise aws_error(err, f"EC2 CreateFleet ({capacity})", base=ReplacementError) from err
            if answer.get("Instances"):
                return f"fleet/{answer['FleetId']}"
            logger.warning("fleet launched nothing", extra={"capacity": capacity, "errors": answer.get("Errors")})
        raise ReplacementError("EC2 Fleet launched no instance, spot nor on-demand")
