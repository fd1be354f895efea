"""What the integration tests hand gpuwarden, built from the captured samples in events/ (events/README.md
says where each was captured): a Spot warning sent now (or so that some of its two minutes remain), an
Alertmanager notification with its message edited, and a runbook request as a direct invoke sends it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.services.dispatch import handle_runbook
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import NODE


def spot_warning(
    world: World, instance_id: str | None = None, *, seconds_left: float = 120.0, **overrides: Any
) -> dict[str, Any]:
    """The sample Spot warning (events/spot-interruption.json), sent so that ``seconds_left`` of its
    two minutes remain on the simulator's clock; ``instance_id``: another instance than the sample's."""
    sent = world.sim.clock.now() - timedelta(seconds=120 - seconds_left)
    event = load_event("spot-interruption.json", time=rfc3339(sent), **overrides)
    if instance_id is not None:
        event["detail"]["instance-id"] = instance_id
        event["resources"] = [f"arn:aws:ec2:us-west-2a:instance/{instance_id}"]
    return event


def with_message(sample: str, edit: Callable[[str], str]) -> dict[str, Any]:
    """An Alertmanager notification sample (an SNS record) whose message ``edit`` rewrote."""
    event = load_event(sample)
    sns = event["Records"][0]["Sns"]
    sns["Message"] = edit(sns["Message"])
    return event


def runbook(world: World, policy: Policy | None = None, **payload: Any) -> dict[str, Any]:
    """Parse the payload as a direct invoke would (on the samples' node unless it names an instance),
    run it on the ports a request gets."""
    request = parse_runbook({"node": NODE, **payload} if "instance_id" not in payload else payload)
    return handle_runbook(request, runbook_deps(world.deps(policy), request)).to_json()
