"""What every deployed handler shares: dependencies built once per warm container."""

from __future__ import annotations

import hashlib
import re
from functools import cache
from typing import Any

from gpuwarden.config import Settings
from gpuwarden.services.context import Deps


def execution_name(state: dict[str, Any]) -> str:
    """Deterministic per (event, node): a duplicate start is refused by Step Functions."""
    digest = hashlib.sha256(f"{state['event_id']}/{state['node']}".encode()).hexdigest()[:20]
    node = re.sub(r"[^A-Za-z0-9_-]", "-", str(state["node"]))[:50]
    return f"{node}-{digest}"


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def deps() -> Deps:
    from gpuwarden.wiring import build_deps

    current = settings()
    arn = current.drain_state_machine_arn

    def start_drain(state: dict[str, Any]) -> None:
        import json

        import boto3

        client = boto3.session.Session().client("stepfunctions", region_name=current.region)
        try:
            client.start_execution(stateMachineArn=arn, name=execution_name(state), input=json.dumps(state))
        except client.exceptions.ExecutionAlreadyExists:
            return

    return build_deps(current, caller="eventbridge", start_drain=start_drain if arn else None)
