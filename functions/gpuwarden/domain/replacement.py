"""Which replacement capacity to launch for a node, and the NodeClaim for Karpenter (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.policy import ReplacementPolicy
from gpuwarden.domain.views import (
    CAPACITY_RESERVATION_LABEL,
    CAPACITY_TYPE_LABEL,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    ZONE_LABEL,
    NodeView,
    PodView,
)

Strategy = Literal["nodeclaim", "asg", "fleet", "none"]


@dataclass(frozen=True)
class ReplacementChoice:
    strategy: Strategy
    reason: str
    target: str | None = None


def choose_replacement(node: NodeView, asg: str | None, policy: ReplacementPolicy) -> ReplacementChoice:
    if not policy.enabled:
        return ReplacementChoice("none", "replacement disabled by policy")
    if node.nodepool:
        return ReplacementChoice("nodeclaim", f"Karpenter node of NodePool {node.nodepool}", node.nodepool)
    if asg:
        return ReplacementChoice("asg", f"member of Auto Scaling group {asg}", asg)
    if policy.fleet_launch_template:
        return ReplacementChoice("fleet", "EC2 Fleet from the policy's launch template", policy.fleet_launch_template)
    return ReplacementChoice("none", "no NodePool, no Auto Scaling group, no fleet launch template configured")


def nodeclaim_name(event_id: str, node: str) -> str:
    """Deterministic: a re-delivery creates the same name, which the API refuses as a duplicate."""
    digest = hashlib.sha256(f"{event_id}/{node}".encode()).hexdigest()[:12]
    return f"gpuwarden-{digest}"


def _allowed(requirements: Sequence[Mapping[str, Any]], key: str) -> list[str] | None:
    """The values an `In` requirement allows for key (None: unconstrained)."""
    for req in requirements:
        if req.get("key") == key and req.get("operator") == "In":
            return [str(v) for v in req.get("values") or []]
    return None


def steering(node: NodeView, requirements: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Requirements that steer a spot replacement away from the interrupted capacity pool.

    A pool is instance type + zone + capacity type; requirements are ANDed, so gpuwarden
    excludes the first of those the NodePool leaves room to avoid.
    """
    reservation = node.capacity_reservation_id
    if reservation:  # a reservation being reclaimed, or a Capacity Block ending: never back into it
        return (
            [{"key": CAPACITY_RESERVATION_LABEL, "operator": "NotIn", "values": [reservation]}],
            f"avoid the capacity reservation {reservation}",
        )
    if node.capacity_type != "spot":
        return [], "not spot: no capacity pool to avoid"
    candidates = (
        (INSTANCE_TYPE_LABEL, node.instance_type),
        (ZONE_LABEL, node.zone),
    )
    for key, current in candidates:
        allowed = _allowed(requirements, key)
        if current and (allowed is None or any(v != current for v in allowed)):
            return [{"key": key, "operator": "NotIn", "values": [current]}], f"avoid {key}={current}"
    capacity = _allowed(requirements, CAPACITY_TYPE_LABEL)
    if capacity is None or "on-demand" in capacity:
        return [{"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]}], "fall back to on-demand"
    return [], "the NodePool allows only the interrupted pool"


def nodeclaim_manifest(
    nodepool: Mapping[str, Any], node: NodeView, pods: Sequence[PodView], event_id: str
) -> tuple[dict[str, Any], str]:
    """A karpenter.sh/v1 NodeClaim from the NodePool's template, sized for the GPU pods moved."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    tspec = dict(template.get("spec") or {})
    tmeta = template.get("metadata") or {}
    requirements = [dict(r) for r in tspec.get("requirements") or []]
    extra, why = steering(node, requirements)
    gpus = sum(p.gpu_request for p in pods if not p.is_daemonset and not p.finished)
    spec: dict[str, Any] = {
        "nodeClassRef": tspec.get("nodeClassRef"),
        "requirements": requirements + extra,
    }
    for key in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if key in tspec:
            spec[key] = tspec[key]
    if gpus:
        spec["resources"] = {"requests": {GPU_RESOURCE: str(gpus)}}
    pool_name = str((nodepool.get("metadata") or {}).get("name", node.nodepool))
    manifest = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": nodeclaim_name(event_id, node.name),
            "labels": {**dict(tmeta.get("labels") or {}), NODEPOOL_LABEL: pool_name},
            "annotations": {
                **dict(tmeta.get("annotations") or {}),
                ann.EVENT_ID: event_id,
                ann.PREFIX + "replaces": node.name,
            },
        },
        "spec": spec,
    }
    return manifest, why
