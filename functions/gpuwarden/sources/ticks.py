"""Our EventBridge Scheduler target input: the ticks of the scheduled function (budget windows opening
and closing, the periodic reconcile, plans falling due). Which actions there are is the kinds'
(their spec's ``ticks``, gpuwarden/kinds/): `gpuwarden.kinds.inputs.parse_scheduler_tick` refuses
any other.

Every schedule gpuwarden creates invokes the scheduled function with this JSON as the
target ``Input`` (the ``<aws.scheduler.…>`` keywords are EventBridge Scheduler context
attributes, replaced at each invocation):

    {
      "gpuwarden": "budget-window",                      # marks the input as ours (required)
      "action": "open" | "close" | "reconcile" | "<plan>-due" (maintenance-due, capacity-block-due),
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
#: A tick's action: a kind's (`KindSpec.ticks`); lower-case words joined by dashes.
TickAction = Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$", max_length=64)]
#: The suffix of a plan's tick: it runs the plan it names (``plan_id``).
DUE = "-due"


def _unreplaced_to_none(value: object) -> object:
    if isinstance(value, str) and value.startswith("<aws.scheduler."):
        return None
    return value


Context = BeforeValidator(_unreplaced_to_none)


def _needed(action: str) -> str | None:
    """What a tick action must name: a window opening or closing its window, a plan falling due its plan."""
    if action in ("open", "close"):
        return "window"
    return "plan_id" if action.endswith(DUE) else None


class SchedulerTick(BaseModel):
    """One Scheduler invocation of the scheduled function: a window's, the reconcile's, or a plan's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpuwarden: Literal["budget-window"] = "budget-window"
    action: TickAction
    window: Name | None = None
    plan_id: Name | None = None
    scheduled_time: Annotated[AwareDatetime | None, Context] = None
    schedule_arn: Annotated[Annotated[str, Field(max_length=2048)] | None, Context] = None
    execution_id: Annotated[Name | None, Context] = None
    attempt: Annotated[Annotated[int, Field(ge=1, le=1000)] | None, Context] = None

    @model_validator(mode="after")
    def _names_what_it_acts_on(self) -> Self:
        needed = _needed(self.action)
        if needed is not None and getattr(self, needed) is None:
            raise PydanticCustomError(
                "missing_for_action",
                "'{field}' is required when action is '{action}'",
                {"field": needed, "action": self.action},
            )
        return self
