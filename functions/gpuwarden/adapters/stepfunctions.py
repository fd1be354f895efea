"""The drain workflow's start (docs/architecture.md, "The pipeline"): one Step Functions execution
per (event, node), named so that a second start of the same drain is refused, not run twice."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any


def execution_name(state: dict[str, Any]) -> str:
    """Deterministic per (event, node): a duplicate start is refused by Step Functions."""
    digest = hashlib.sha256(f"{state['event_id']}/{state['node']}".encode()).hexdigest()[:20]
    node = re.sub(r"[^A-Za-z0-9_-]", "-", str(state["node"]))[:50]
    return f"{node}-{digest}"


@cache
def stepfunctions(region: str | None) -> Any:
    """One Step Functions client per container (a client costs tens of ms of CPU to make)."""
    from gpuwarden.adapters.sdk import client

    return client("stepfunctions", region)


def drain_starter(region: str | None, arn: str) -> Callable[[dict[str, Any]], None]:
    """``Deps.start_drain`` of the deployed functions: start the drain workflow with a drain's
    first state; an execution of the same name already there is the same drain, already started."""

    def start_drain(state: dict[str, Any]) -> None:
        client = stepfunctions(region)
        try:
            client.start_execution(stateMachineArn=arn, name=execution_name(state), input=json.dumps(state))
        except client.exceptions.ExecutionAlreadyExists:
            return

    return start_drain
