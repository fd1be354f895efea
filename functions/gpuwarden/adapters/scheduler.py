"""EventBridge Scheduler through the AWS SDK (`adapters/sdk.py`): one-time schedules for maintenance plans."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from gpuwarden.adapters.errors import aws_call, aws_error

#: Scheduler retries a failed invocation this often, for at most this long (then the DLQ).
RETRY_ATTEMPTS = 5
MAX_EVENT_AGE_SECONDS = 3600


def at_expression(at: datetime) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC (the schedule's time zone is UTC), rounded up to the second."""
    utc = at.astimezone(UTC)
    if utc.microsecond:
        utc = utc.replace(microsecond=0) + timedelta(seconds=1)
    return f"at({utc.strftime('%Y-%m-%dT%H:%M:%S')})"


class EventBridgeScheduler:
    """The `SchedulerPort`: schedules in ``group`` that invoke ``target_arn`` with ``role_arn``."""

    def __init__(
        self,
        group: str,
        target_arn: str,
        role_arn: str,
        region: str | None = None,
        dead_letter_arn: str | None = None,
    ) -> None:
        self.group = group
        self.target_arn = target_arn
        self.role_arn = role_arn
        self.dead_letter_arn = dead_letter_arn
        self._region = region

    @cached_property
    def _client(self) -> Any:
        from gpuwarden.adapters.sdk import client

        return client("scheduler", self._region)

    def schedule_once(self, name: str, at: datetime, payload: Mapping[str, Any]) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        target: dict[str, Any] = {
            "Arn": self.target_arn,
            "RoleArn": self.role_arn,
            "Input": json.dumps(dict(payload), sort_keys=True),
            "RetryPolicy": {"MaximumRetryAttempts": RETRY_ATTEMPTS, "MaximumEventAgeInSeconds": MAX_EVENT_AGE_SECONDS},
        }
        if self.dead_letter_arn:
            target["DeadLetterConfig"] = {"Arn": self.dead_letter_arn}
        try:
            answer = self._client.create_schedule(
                Name=name,
                GroupName=self.group,
                ScheduleExpression=at_expression(at),
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                ActionAfterCompletion="DELETE",
                Target=target,
                Description="gpuwarden maintenance plan: drain when its window opens",
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ConflictException":
                return self._arn_of(name)  # a re-delivery: the plan is scheduled already
            raise aws_error(err, f"Scheduler CreateSchedule {self.group}/{name}") from err
        except BotoCoreError as err:
            raise aws_error(err, f"Scheduler CreateSchedule {self.group}/{name}") from err
        return str(answer["ScheduleArn"])

    def _arn_of(self, name: str) -> str:
        with aws_call(f"Scheduler GetSchedule {self.group}/{name}"):
            return str(self._client.get_schedule(Name=name, GroupName=self.group)["Arn"])
