"""The GPU-health scan's Scheduler target input (docs/gpu-signals.md).

The every-minute schedule invokes the GPU-health function with::

    {"gpuwarden": "gpu-health-scan", "scheduled_time": "<aws.scheduler.scheduled-time>",
     "execution_id": "<aws.scheduler.execution-id>"}

`gpuwarden scan` runs the same scan without any input.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from ._common import Name
from .ticks import Context

SCAN_MARKER: Literal["gpu-health-scan"] = "gpu-health-scan"


class ScanTick(BaseModel):
    """One Scheduler invocation of the GPU-health scan."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpuwarden: Literal["gpu-health-scan"] = SCAN_MARKER
    scheduled_time: Annotated[AwareDatetime | None, Context] = None
    schedule_arn: Annotated[Name | None, Context] = None
    execution_id: Annotated[Name | None, Context] = None
    attempt: Annotated[int | None, Context] = None
