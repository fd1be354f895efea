"""EC2, Auto Scaling and EC2 Fleet through boto3 (the standard SDK chain, AWS_ENDPOINT_URL honoured)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from gpuwarden.domain.errors import CloudError, ReplacementError
from gpuwarden.observability import logger

ASG_TAG = "aws:autoscaling:groupName"


class Cloud:
    """The `CloudPort`: clients are made on first use (boto3 costs ~0.2 s to import)."""

    def __init__(self, region: str | None = None) -> None:
        self._region = region
        self._lock = threading.Lock()
        self._instances: dict[str, dict[str, Any]] = {}

    def _client(self, service: str) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=3, read_timeout=10)
        return boto3.session.Session().client(service, region_name=self._region, config=config)

    @cached_property
    def ec2(self) -> Any:
        return self._client("ec2")

    @cached_property
    def autoscaling(self) -> Any:
        return self._client("autoscaling")

    @cached_property
    def cloudwatch(self) -> Any:
        return self._client("cloudwatch")

    def _instance(self, instance_id: str) -> dict[str, Any] | None:
        with self._lock:
            if instance_id in self._instances:
                return self._instances[instance_id]
        from botocore.exceptions import ClientError

        try:
            answer = self.ec2.describe_instances(InstanceIds=[instance_id])
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
                return None
            raise CloudError(f"DescribeInstances {instance_id}: {err}") from err
        found = [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]
        instance = found[0] if found else None
        if instance is not None:
            with self._lock:
                self._instances[instance_id] = instance
        return instance

    def private_dns_name(self, instance_id: str) -> str | None:
        instance = self._instance(instance_id)
        return (instance or {}).get("PrivateDnsName") or None

    def asg_of(self, instance_id: str) -> str | None:
        instance = self._instance(instance_id) or {}
        tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags", [])}
        return tags.get(ASG_TAG)

    def raise_asg_desired(self, group: str, token: str) -> str:
        """+1 desired capacity, within MaxSize. The caller guarantees once per node."""
        from botocore.exceptions import ClientError

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
        except ClientError as err:
            raise ReplacementError(f"Auto Scaling group {group}: {err}") from err
        logger.info("asg desired raised", extra={"group": group, "desired": desired + 1, "token": token})
        return f"asg/{group}"

    def terminate_in_asg(self, instance_id: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.autoscaling.terminate_instance_in_auto_scaling_group(
                InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
            )
        except ClientError as err:
            raise CloudError(f"TerminateInstanceInAutoScalingGroup {instance_id}: {err}") from err

    def gpu_utilization(
        self, cluster: str, instance_id: str, node_name: str, minutes: int, period_seconds: int
    ) -> list[float]:
        """Container Insights `node_gpu_utilization` (Average per period) over the last `minutes`, oldest first."""
        from datetime import UTC, datetime, timedelta

        from botocore.exceptions import ClientError

        end = datetime.now(UTC)
        dimensions = [
            {"Name": "ClusterName", "Value": cluster},
            {"Name": "InstanceId", "Value": instance_id},
            {"Name": "NodeName", "Value": node_name},
        ]
        query = {
            "Id": "gpu",
            "MetricStat": {
                "Metric": {
                    "Namespace": "ContainerInsights",
                    "MetricName": "node_gpu_utilization",
                    "Dimensions": dimensions,
                },
                "Period": period_seconds,
                "Stat": "Average",
            },
            "ReturnData": True,
        }
        try:
            answer = self.cloudwatch.get_metric_data(
                MetricDataQueries=[query],
                StartTime=end - timedelta(minutes=minutes),
                EndTime=end,
                ScanBy="TimestampAscending",
            )
        except ClientError as err:
            raise CloudError(f"GetMetricData node_gpu_utilization {node_name}: {err}") from err
        results = answer.get("MetricDataResults") or []
        return [float(v) for r in results for v in r.get("Values") or []]

    def launch_fleet(self, token: str, template: str, instance_types: Sequence[str], subnets: Sequence[str]) -> str:
        """EC2 Fleet `instant`: spot first over several types, on-demand when spot has none."""
        from botocore.exceptions import ClientError

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
            except ClientError as err:
                raise ReplacementError(f"CreateFleet ({capacity}): {err}") from err
            if answer.get("Instances"):
                return f"fleet/{answer['FleetId']}"
            logger.warning("fleet launched nothing", extra={"capacity": capacity, "errors": answer.get("Errors")})
        raise ReplacementError("EC2 Fleet launched no instance, spot nor on-demand")
