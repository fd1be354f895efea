"""The JSON answer of every entry point (CONTRACT §5)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

Outcome = Literal["handled", "ignored", "duplicate", "dry-run", "failed"]


class Result(BaseModel):
    outcome: Outcome
    kind: str
    #: runbook requests only (CONTRACT §5): the action asked for, and whether nothing was changed
    action: str | None = None
    dry_run: bool | None = None
    node: str | None = None
    instance_id: str | None = None
    event_id: str | None = None
    reason: str
    deadline: datetime | None = None
    actions: list[dict[str, Any]] = Field(default_factory=list)
    plan: list[dict[str, Any]] | None = None
    drain: dict[str, Any] | None = None
    seconds_left: float | None = None
    results: list[Result] | None = None
    #: runbook `status`: what gpuwarden knows of the node
    status: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
