"""Karpenter's interruption messages (karpenter-provider-aws ``pkg/controllers/interruption/messages``):
which EventBridge events it reads, and as what."""

from __future__ import annotations

from enum import StrEnum

from sim.actors.karpenter.objects import Obj


class MessageKind(StrEnum):
    """The interruption message kinds of karpenter-provider-aws (``messages.Kind``)."""

    SPOT_INTERRUPTED = "spot_interrupted"
    SCHEDULED_CHANGE = "scheduled_change"
    INSTANCE_STOPPED = "instance_stopped"
    INSTANCE_TERMINATED = "instance_terminated"
    CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
    REBALANCE_RECOMMENDATION = "rebalance_recommendation"
    INSTANCE_STATUS = "instance_status"
    SYSTEM_STATUS = "system_status"


CORDON_AND_DRAIN = frozenset(
    {
        MessageKind.SPOT_INTERRUPTED,
        MessageKind.SCHEDULED_CHANGE,
        MessageKind.INSTANCE_STOPPED,
        MessageKind.INSTANCE_TERMINATED,
        MessageKind.CAPACITY_RESERVATION_INTERRUPTED,
    }
)
FORCEFUL = frozenset({MessageKind.INSTANCE_STATUS, MessageKind.SYSTEM_STATUS})
_STOPPED_STATES = {"stopping": MessageKind.INSTANCE_STOPPED, "stopped": MessageKind.INSTANCE_STOPPED}
_GONE_STATES = {"shutting-down": MessageKind.INSTANCE_TERMINATED, "terminated": MessageKind.INSTANCE_TERMINATED}


def parse_message(event: Obj) -> tuple[MessageKind, list[str]] | None:
    """An EventBridge event as Karpenter's parsers read it: (kind, instance ids), or None
    when Karpenter ignores it (another source, a state it does not react to, another service)."""
    detail = event.get("detail") or {}
    source, detail_type = event.get("source"), event.get("detail-type")
    if source == "aws.health" and detail_type == "AWS Health Event":
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return None
        ids = [str(e.get("entityValue")) for e in detail.get("affectedEntities") or []]
        return MessageKind.SCHEDULED_CHANGE, ids
    if source != "aws.ec2":
        return None
    instance = [str(detail.get("instance-id"))]
    if detail_type == "EC2 Spot Instance Interruption Warning":
        return MessageKind.SPOT_INTERRUPTED, instance
    if detail_type == "EC2 Instance Rebalance Recommendation":
        return MessageKind.REBALANCE_RECOMMENDATION, instance
    if detail_type == "EC2 Capacity Reservation Instance Interruption Warning":
        return MessageKind.CAPACITY_RESERVATION_INTERRUPTED, instance
    if detail_type == "EC2 Instance State-change Notification":
        state = str(detail.get("state", "")).lower()
        kind = _STOPPED_STATES.get(state) or _GONE_STATES.get(state)
        return (kind, instance) if kind else None
    return None
