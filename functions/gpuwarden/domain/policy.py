"""The policy document (docs/policy.md), validated once, frozen everywhere."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from gpuwarden.domain.schedule import Windows, parse_duration


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuIdlePolicy(_Frozen):
    #: switch (domain/switches.py): off, gpu-idle notices are ignored and the stack creates no alarm
    enabled: bool = True
    threshold_percent: float = Field(default=10.0, gt=0, le=100)
    period_seconds: int = Field(default=300, ge=60)
    evaluation_minutes: int = Field(default=60, ge=5)
    max_nodes_per_evaluation: int = Field(default=3, ge=1)
    #: 0 by default: Karpenter brings a GPU pool back from zero, and an idle GPU node costs most.
    min_nodes_per_nodepool: int = Field(default=0, ge=0)
    drain_limit_seconds: int = Field(default=1800, ge=60)


class RebalancePolicy(_Frozen):
    enabled: bool = True
    action: Literal["prepare", "drain"] = "prepare"


class ReplacementPolicy(_Frozen):
    enabled: bool = True
    fleet_launch_template: str | None = None
    fleet_instance_types: list[str] = Field(default_factory=list)
    fleet_subnets: list[str] = Field(default_factory=list)
    #: Keep a new replacement NodeClaim from consolidation (karpenter.sh/do-not-disrupt) until its
    #: pods run on it, or this long at most (docs/cluster.md, "Replacement capacity").
    hold_minutes: int = Field(default=15, ge=1, le=24 * 60)
    #: Launches per interrupted node, when one fails to launch (the next option each time).
    attempts: int = Field(default=3, ge=1, le=10)


class CheckpointPolicy(_Frozen):
    default_timeout_seconds: int = Field(default=60, ge=1, le=3600)
    allow_exec: bool = True


class DrainPolicy(_Frozen):
    #: Longest backoff between rounds of evictions blocked by a PodDisruptionBudget.
    max_backoff_seconds: float = Field(default=5.0, gt=0, le=60)
    #: Voluntary drains (maintenance, manual) give up after this long.
    voluntary_limit_seconds: int = Field(default=3600, ge=60)


class MaintenancePolicy(_Frozen):
    #: switch: AWS Health scheduled maintenance planned into a window and drained ahead of it
    enabled: bool = True


class NodePoolWindowsPolicy(_Frozen):
    #: switch: the budget windows written to the NodePools (budgets, GPU caps)
    enabled: bool = True


class CapacityBlocksPolicy(_Frozen):
    #: switch: Capacity Block planning (a delivered block's drain planned before it ends); the
    #: block-expiry warning itself, like a Spot warning, is always handled
    enabled: bool = True
    #: Ask for checkpoints (start the drain) this long before EC2 starts terminating a Capacity
    #: Block's instances (30 min before the block ends).
    lead_minutes: int = Field(default=30, ge=1, le=24 * 60)


class KarpenterExpiryPolicy(_Frozen):
    """The karpenter-expiry kind (docs/cluster.md, "Expiry")."""

    #: switch: plan a drain before Karpenter expires a node (spec.expireAfter)
    enabled: bool = True
    #: Start the drain this long before Karpenter expires the node.
    lead_minutes: int = Field(default=30, ge=1, le=24 * 60)


_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_KEY = rf"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}"
_LABEL_VALUE = rf"(?:{_LABEL_NAME})?"
_SELECTOR_TERM = re.compile(rf"!?{_LABEL_KEY}|{_LABEL_KEY}\s*(?:==|!=|=)\s*{_LABEL_VALUE}")


def _node_selector(value: str) -> str:
    """Equality-based label selector terms, comma-joined: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``
    (what the scan passes to the node LIST and what doctor evaluates); empty: every node."""
    for term in (t.strip() for t in value.split(",")):
        if value.strip() and not _SELECTOR_TERM.fullmatch(term):
            raise ValueError(
                f"invalid node selector term {term!r}: use label keys and values as k, !k, k=v or k!=v, comma-joined "
                "(set-based terms such as 'k in (a,b)' are not read)"
            )
    return value.strip()


def _duration(value: object) -> object:
    """``"10m"``-style text (the windows' duration form) → timedelta; anything else is refused."""
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, timedelta):
        return value
    raise ValueError(f"invalid duration {value!r}: expected text such as '10m' or '1h30m'")


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class GpuHealthPolicy(_Frozen):
    """The GPU-health scan and the gpu-unhealthy kind (docs/gpu-signals.md)."""

    enabled: bool = True
    #: Narrows the scan's one LIST of nodes (docs/gpu-signals.md); empty: every accelerator node.
    node_selector: Annotated[str, AfterValidator(_node_selector)] = Field(default="", max_length=256)
    #: When Karpenter's node repair / EKS auto repair replace an unhealthy node (both: 10 min).
    repair_after: Duration = timedelta(minutes=10)
    #: A broken DCGM must not drain a whole NodePool (Karpenter's own repair stops above 20 %).
    max_unhealthy_percent: float = Field(default=20.0, ge=0, le=100)


#: The kinds an Alertmanager alert may be mapped to (docs/gpu-signals.md).
AlertKind = Literal["gpu-idle", "gpu-unhealthy"]


class Policy(_Frozen):
    cluster: str = Field(min_length=1, max_length=100)
    windows: Windows = Field(default_factory=list)
    gpu_idle: GpuIdlePolicy = GpuIdlePolicy()
    rebalance: RebalancePolicy = RebalancePolicy()
    replacement: ReplacementPolicy = ReplacementPolicy()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    drain: DrainPolicy = DrainPolicy()
    capacity_blocks: CapacityBlocksPolicy = CapacityBlocksPolicy()
    karpenter_expiry: KarpenterExpiryPolicy = KarpenterExpiryPolicy()
    gpu_health: GpuHealthPolicy = GpuHealthPolicy()
    #: Alertmanager alert name → the kind its firing alerts are.
    alerts: dict[Annotated[str, Field(min_length=1, max_length=256)], AlertKind] = Field(default_factory=dict)
    maintenance: MaintenancePolicy = MaintenancePolicy()
    nodepool_windows: NodePoolWindowsPolicy = NodePoolWindowsPolicy()
