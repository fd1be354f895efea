"""The one domain notice every event source is turned into."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Kind(StrEnum):
    """The contract's kinds (docs/events.md), by name. Everything else a kind is (its events, rules,
    whether it is voluntary, its plan and hooks, its switch) is its spec: gpuwarden/kinds/."""

    SPOT_INTERRUPTION = "spot-interruption"
    REBALANCE = "rebalance"
    SCHEDULED_MAINTENANCE = "scheduled-maintenance"
    INSTANCE_STOPPING = "instance-stopping"
    CAPACITY_RESERVATION_INTERRUPTION = "capacity-reservation-interruption"
    CAPACITY_BLOCK_EXPIRY = "capacity-block-expiry"
    CAPACITY_BLOCK_PLAN = "capacity-block-plan"
    KARPENTER_EXPIRY = "karpenter-expiry"
    GPU_IDLE = "gpu-idle"
    GPU_UNHEALTHY = "gpu-unhealthy"
    KARPENTER_DISRUPTION = "karpenter-disruption"
    BUDGET_WINDOW = "budget-window"
    MANUAL = "manual"


SPOT_NOTICE_SECONDS = 120
#: A Capacity Block's expiration warning comes 40 min before the block ends; EC2 starts
#: terminating its instances 10 min after the warning, 30 min before the end (docs/events.md).
CAPACITY_BLOCK_WARNING_SECONDS = 600
CAPACITY_BLOCK_TERMINATION_LEAD_SECONDS = 1800


class Notice(BaseModel):
    """What happened to which instance (or node), and by when it must be handled.

    ``instance_id`` or ``node_name`` names the target (CloudWatch alarms may carry only
    a node name). ``deadline`` is None where the kind has none (rebalance, gpu-idle).
    ``detail`` keeps the few source fields later steps need (state, alarm name, …).
    """

    model_config = ConfigDict(frozen=True)

    kind: Kind
    event_id: str = Field(min_length=1, max_length=256)
    instance_id: str | None = None
    node_name: str | None = None
    #: Capacity Block kinds name a reservation (``cr-…``), not an instance.
    capacity_reservation_id: str | None = None
    deadline: datetime | None = None
    event_time: datetime
    source: str
    detail_type: str
    region: str | None = None
    account: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    #: The cluster the event itself names (an alarm's ``ClusterName`` dimension or contributor
    #: attribute, an alert's ``ClusterName`` / ``cluster`` label); None: it names none.
    cluster: str | None = None

    @property
    def target(self) -> str:
        return self.node_name or self.instance_id or self.capacity_reservation_id or "?"


def other_cluster(notice: Notice, cluster: str) -> str | None:
    """Why a notice that names another cluster is not this stack's (docs/events.md, "Whose
    cluster"): a node name is no proof, two clusters may share an address range. None: it names
    this cluster, or none."""
    if notice.cluster is None or notice.cluster == cluster:
        return None
    return (
        f"{notice.target}: the event names cluster {notice.cluster}, not {cluster} (this stack's cluster): "
        "ignored whatever node it names"
    )
