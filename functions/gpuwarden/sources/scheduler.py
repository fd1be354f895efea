"""Our EventBridge Scheduler target input: budget-window ticks.

Every schedule gpuwarden creates invokes the windows function with this JSON as the
target ``Input`` (the ``<aws.scheduler.…>`` keywords are EventBridge Scheduler context
attributes, replaced at each invocation):

    {
      "gpuwarden": "budget-window",                      # marks the input as ours (required)
      "action": "open" | "close" | "reconcile" | "maintenance-due" | "capacity-block-due",
      "window": "<policy window name>",                  # required for open / close
      "plan_id": "<plan id>",                            # required for maintenance-due; the Capacity
                                                         # Block's reservation id for capacity-block-due
      "scheduled_time": "<aws.scheduler.scheduled-time>",
      "schedule_arn": "<aws.scheduler.schedule-arn>",
      "execution_id": "<aws.scheduler.execution-id>",
      "attempt": "<aws.scheduler.attempt-number>"
    }

Only ``gpuwarden`` and ``action`` are required otherwise; unknown keys are rejected (the
input is ours, so a typo is a bug). A context-attribute keyword that was not replaced
(the template run by hand) reads as "not given".
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ._common import Name

MARKER: Literal["budget-window"] = "budget-window"
WindowAction = Literal["open", "close", "reconcile", "maintenance-due", "capacity-block-due"]


def _unreplaced_to_none(value: object) -> object:
    if isinstance(value, str) and value.startswith("<aws.scheduler."):
        return None
    return value


Context = BeforeValidator(_unreplaced_to_none)


#: What each tick action must name.
_NEEDED = {"open": "window", "close": "window", "maintenance-due": "plan_id", "capacity-block-due": "plan_id"}


class WindowTick(BaseModel):
    """One Scheduler invocation of the windows function."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpuwarden: Literal["budget-window"] = "budget-window"
    action: WindowAction
    window: Name | None = None
    plan_id: Name | None = None
    scheduled_time: Annotated[AwareDatetime | None, Context] = None
    schedule_arn: Annotated[Annotated[str, Field(max_length=2048)] | None, Context] = None
    execution_id: Annotated[Name | None, Context] = None
    attempt: Annotated[Annotated[int, Field(ge=1, le=1000)] | None, Context] = None

    @model_validator(mode="after")
    def _names_what_it_acts_on(self) -> Self:
        needed = _NEEDED.get(self.action)
        if needed is not None and getattr(self, needed) is None:
            raise PydanticCustomError(
                "missing_for_action",
                "'{field}' is required when action is '{action}'",
                {"field": needed, "action": self.action},
            )
        return self
