"""An incident as the EventBridge events AWS sends for it (the shapes of events/), for every reactor."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from sim.apiserver.jsondoc import clone
from sim.clock import rfc3339
from sim.outcome.events import Incident, IncidentKind
from sim.outcome.world import World

EVENTS = Path(__file__).resolve().parents[2] / "events"
_TEMPLATES = {
    IncidentKind.SPOT_INTERRUPTION: "spot-interruption.json",
    IncidentKind.REBALANCE: "rebalance-recommendation.json",
    IncidentKind.MAINTENANCE: "health-scheduled-maintenance.json",
}


def instance_of(world: World, node: str) -> str:
    return next(i for i, n in world.instance_node.items() if n == node)


def payloads(world: World, incident: Incident, nodes: list[str]) -> list[dict[str, Any]]:
    """The EventBridge events of an incident, as AWS sends them (the shapes of events/)."""
    now = world.engine.when(incident.at)
    if incident.kind is IncidentKind.CAPACITY_BLOCK_END:
        pool = world.scenario.pool(incident.pool)
        end = now + timedelta(minutes=40)
        return [
            {
                "version": "0",
                "id": incident.id,
                "detail-type": "Capacity Block Reservation Expiration Warning",
                "source": "aws.ec2",
                "account": "123456789012",
                "time": rfc3339(now),
                "region": world.scenario.region,
                "resources": [
                    f"arn:aws:ec2:{world.scenario.region}:123456789012:capacity-reservation/"
                    f"{pool.capacity_reservation_id}"
                ],
                "detail": {"capacity-reservation-id": pool.capacity_reservation_id, "end-date": rfc3339(end)},
            }
        ]
    template = json.loads((EVENTS / _TEMPLATES[incident.kind]).read_text())
    out = []
    for node in nodes:
        instance = instance_of(world, node)
        event = clone(template)
        event["id"] = f"{incident.id}-{instance}"
        event["time"] = rfc3339(now)
        if incident.kind is IncidentKind.MAINTENANCE:
            start = now + timedelta(seconds=incident.lead or 0)
            event["detail"]["startTime"] = start.strftime("%a, %d %b %Y %H:%M:%S GMT")
            # AWS Health names an EC2 instance by its id in `entityValue` (the AWS Health user guide's examples)
            event["detail"]["affectedEntities"][0]["entityValue"] = instance
            event["detail"]["eventArn"] += f"-{incident.id}"
        else:
            event["detail"]["instance-id"] = instance
            event["resources"] = [f"arn:aws:ec2:{world.scenario.region}:123456789012:instance/{instance}"]
        out.append(event)
    return out
