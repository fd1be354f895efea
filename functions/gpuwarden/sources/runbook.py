"""The runbook payload (docs/cli.md): a direct invoke of the runbook function, or the CLI.

    {"action": "cordon|uncordon|drain|checkpoint|replace|status|plan",
     "node": "<name>" | "instance_id": "i-…", "dry_run": bool, "force": bool, "reason": "…"}

Exactly one of ``node`` / ``instance_id``. ``dry_run`` and ``force`` must be JSON booleans:
``"force": "yes"`` is an error, not a yes. Unknown keys are rejected.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from pydantic_core import PydanticCustomError

from ._common import InstanceId, NodeName

RunbookAction = Literal["plan", "status", "cordon", "uncordon", "drain", "checkpoint", "replace"]
#: The runbook's actions, in the order the CLI lists them: the one list (services map each to its code).
RUNBOOK_ACTIONS: tuple[str, ...] = get_args(RunbookAction)


class RunbookRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    action: RunbookAction
    node: NodeName | None = None
    instance_id: InstanceId | None = None
    dry_run: StrictBool = False
    force: StrictBool = False
    reason: Annotated[str, Field(max_length=1024)] = ""

    @model_validator(mode="after")
    def _exactly_one_target(self) -> Self:
        given = [name for name in ("node", "instance_id") if getattr(self, name) is not None]
        if len(given) != 1:
            raise PydanticCustomError(
                "one_target",
                "exactly one of 'node' or 'instance_id' is required: {got}",
                {"got": "both were given" if given else "neither was given"},
            )
        return self

    @property
    def target(self) -> str:
        return self.node or self.instance_id or "?"
