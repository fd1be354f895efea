"""Which replacement capacity to launch for a node, and the NodeClaim for Karpenter (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.accelerators import ResourceClaimView, model_requirements, pod_accelerators, replacement_demand
from gpuwarden.domain.errors import NoFittingReplacement
from gpuwarden.domain.instance_labels import instance_label
from gpuwarden.domain.nodepools import nodepool_from_json
from gpuwarden.domain.placement import (
    GPU_NAME_LABEL,
    Req,
    gang_zone,
    one_per_key,
    pod_requirements,
    untolerated,
    values_for,
)
from gpuwarden.domain.placement import conflict as _conflict
from gpuwarden.domain.policy import ReplacementPolicy
from gpuwarden.domain.sizing import daemons_for, movers, size
from gpuwarden.domain.views import (
    CAPACITY_RESERVATION_LABEL,
    CAPACITY_TYPE_LABEL,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    ZONE_LABEL,
    NodeView,
    PodView,
    Taint,
)
from gpuwarden.domain.volumes import VolumePin, pin_to_volumes

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


def claimable(node: NodeView) -> bool:
    """No replacement is claimed on ``node`` yet, and Karpenter has not begun to replace it itself
    (docs/cluster.md): the one test both writes of the claim make on the node as it is."""
    return not node.annotations.get(ann.REPLACEMENT) and not node.karpenter_disrupted


def nodeclaim_name(event_id: str, node: str) -> str:
    """Deterministic: a re-delivery creates the same name, which the API refuses as a duplicate."""
    digest = hashlib.sha256(f"{event_id}/{node}".encode()).hexdigest()[:12]
    return f"gpuwarden-{digest}"


_ON_DEMAND = {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]}


def _avoid(key: str, current: str | None, requirements: Sequence[Mapping[str, Any]]) -> tuple[list[Req], str] | None:
    """One requirement that leaves the interrupted pool by ``key``, if the others leave room for it."""
    if key == CAPACITY_TYPE_LABEL:
        if values_for(requirements, key).allows("on-demand"):
            return [dict(_ON_DEMAND)], "fall back to on-demand"
        return None
    if current and values_for(requirements, key).room_without(current):
        return [{"key": key, "operator": "NotIn", "values": [current]}], f"avoid {key}={current}"
    return None


def _steer(
    node: NodeView, requirements: Sequence[Mapping[str, Any]], together: bool = False
) -> tuple[list[Req], str, bool]:
    """(extra requirements, why, whether the interrupted pool is avoided)."""
    reservation = node.capacity_reservation_id
    if reservation:  # a reservation being reclaimed, or a Capacity Block ending: never back into it
        extra = [{"key": CAPACITY_RESERVATION_LABEL, "operator": "NotIn", "values": [reservation]}]
        return extra, f"avoid the capacity reservation {reservation}", True
    if node.capacity_type != "spot":
        return [], "not spot: no capacity pool to avoid", True
    pool = ((INSTANCE_TYPE_LABEL, node.instance_type), (ZONE_LABEL, node.zone), (CAPACITY_TYPE_LABEL, "spot"))
    for key, current in pool:
        if current and not values_for(requirements, key).allows(current):
            return [], f"{key}={current} is already ruled out", True
    # a gang keeps its zone (pinned by the caller) and, first, its instance type: on-demand before another type
    order = (pool[2], pool[0]) if together else pool
    for key, current in order:
        found = _avoid(key, current, requirements)
        if found is not None:
            return found[0], found[1], True
    return [], "the NodePool allows only the interrupted pool", False


def steering(node: NodeView, requirements: Sequence[Mapping[str, Any]]) -> tuple[list[Req], str]:
    """Requirements that steer a spot replacement away from the interrupted capacity pool.

    A pool is instance type + zone + capacity type; requirements are ANDed, so gpuwarden
    excludes the first of those the requirements leave room to avoid (docs/cluster.md).
    """
    extra, why, _ = _steer(node, requirements)
    return extra, why


@dataclass(frozen=True)
class Placement:
    """The NodeClaim's requirements and the pods it is sized for, with why."""

    requirements: list[Req]
    pods: list[PodView]
    reasons: list[str]


def _unique(requirements: Iterable[Req]) -> list[Req]:
    out: list[Req] = []
    for req in requirements:
        if req not in out:
            out.append(req)
    return out


def _sized_for(
    pods: Sequence[PodView], taints: Sequence[Taint], reasons: list[str], claims: Sequence[ResourceClaimView] = ()
) -> list[PodView]:
    """The pods the NodeClaim is for: those that move and tolerate the NodePool's taints (the pods
    that need an accelerator or another device first: the replacement is for them)."""
    moving = movers(pods)
    fit: list[PodView] = []
    for pod in moving:
        blocking = untolerated(pod, taints)
        if blocking:
            shown = ", ".join(f"{t.key}={t.value or ''}:{t.effect}" for t in blocking)
            reasons.append(f"{pod.key} does not tolerate the NodePool's taint {shown}")
        else:
            fit.append(pod)
    needs = {p.key for p in moving if pod_accelerators(p, claims).needs_device}
    if needs and not any(p.key in needs for p in fit):
        raise NoFittingReplacement("; ".join(reasons) or "no accelerator pod fits the NodePool")
    return [p for p in fit if p.key in needs] or fit


def _in_volume_zone(node: NodeView, requirements: list[Req], pin: VolumePin) -> tuple[list[Req], list[str]]:
    """Held to the volumes' zone, and away from the interrupted pool by what is left to vary."""
    pinned = _unique(pin_to_volumes(requirements, pin))  # raises when the pool has no room there
    extra, why, avoided = _steer(node, pinned, together=True)
    if not avoided:
        raise NoFittingReplacement(
            f"{'; '.join(pin.reasons)}: there the NodePool leaves only the interrupted capacity pool ({why})"
        )
    return pinned + extra, [*pin.reasons, why]


def place(
    pool_requirements: Sequence[Mapping[str, Any]],
    taints: Sequence[Taint],
    node: NodeView,
    pods: Sequence[PodView],
    peer_zones: Sequence[str] = (),
    *,
    claims: Sequence[ResourceClaimView] = (),
    volumes: VolumePin | None = None,
) -> Placement:
    """Where the replacement for ``node`` may land: the NodePool's requirements, the moved pods'
    nodeSelector and required node affinity, the interrupted node's accelerator count and model
    where the pods hold what Karpenter cannot request (MIG, DRA: ``claims``), their volumes' zone
    (``volumes``: a hard pin), else their gang's zone (``peer_zones``: the zones of the nodes its
    other pods run on) when that still leaves the interrupted pool avoidable, and the spot
    steering. Raises `NoFittingReplacement` when the NodePool cannot hold the pods."""
    reasons: list[str] = []
    sized = _sized_for(pods, taints, reasons, claims)
    requirements = [dict(r) for r in pool_requirements]
    for pod in sized:
        wanted, dropped = pod_requirements(pod, node.labels)
        requirements += wanted
        reasons += dropped
    kept, why_kept = model_requirements(node, replacement_demand(sized, claims))
    requirements = _unique(requirements + kept)
    reasons += why_kept
    conflict = _conflict(requirements)
    if conflict is not None:
        raise NoFittingReplacement(f"{conflict} ({', '.join(p.key for p in sized)})")
    if volumes is not None and volumes.zones is not None:
        pinned, why_pinned = _in_volume_zone(node, requirements, volumes)
        return Placement(pinned, sized, [*reasons, *why_pinned])
    together = _in_gang_zone(node, requirements, peer_zones, reasons)
    if together is not None:
        return Placement(together, sized, reasons)
    extra, why, _ = _steer(node, requirements)
    return Placement(requirements + extra, sized, [*reasons, why])


def _in_gang_zone(
    node: NodeView, requirements: list[Req], peer_zones: Sequence[str], reasons: list[str]
) -> list[Req] | None:
    """The gang's zone (and GPU model) when that still leaves the interrupted pool avoidable; else
    None, with why in ``reasons``."""
    zone = gang_zone(peer_zones)
    zones = values_for(requirements, ZONE_LABEL)
    if zone and zones.allows(zone) and zones.min_values <= 1:
        pinned = [*requirements, {"key": ZONE_LABEL, "operator": "In", "values": [zone]}]
        gpu_key, gpu = instance_label(node.labels, GPU_NAME_LABEL)  # Karpenter's key, else EKS Auto Mode's
        if gpu and values_for(pinned, gpu_key).allows(gpu):
            pinned.append({"key": gpu_key, "operator": "In", "values": [gpu]})
        extra, why, avoided = _steer(node, _unique(pinned), together=True)
        if avoided:
            reasons += [f"the gang's zone {zone}", why]
            return _unique(pinned) + extra
        reasons.append(f"the gang's zone {zone} leaves only the interrupted pool: another zone")
    elif zone:
        reasons.append(f"the NodePool or the pods rule out the gang's zone {zone}")
    return None


def nodeclaim_manifest(
    nodepool: Mapping[str, Any],
    node: NodeView,
    pods: Sequence[PodView],
    event_id: str,
    peer_zones: Sequence[str] = (),
    *,
    claims: Sequence[ResourceClaimView] = (),
    volumes: VolumePin | None = None,
    daemons: Sequence[PodView] = (),
) -> tuple[dict[str, Any], str]:
    """A karpenter.sh/v1 NodeClaim from the NodePool's template, where the moved pods (and their
    gang) can run, asking what they and the DaemonSet pods (of ``daemons``) that will run there
    request (`sizing.size`: cpu, memory, every accelerator and EFA interface; `place` keeps the
    node's accelerator model for the rest), and one of the NodePool's nodes (`pool_membership`).
    Raises `NoFittingReplacement` when none can hold them."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    tspec = dict(template.get("spec") or {})
    tmeta = template.get("metadata") or {}
    taints = [Taint(str(t.get("key")), str(t.get("effect")), t.get("value")) for t in tspec.get("taints") or ()]
    placed = place(tspec.get("requirements") or [], taints, node, pods, peer_zones, claims=claims, volumes=volumes)
    sized = size(placed.pods, daemons_for(nodepool_from_json(nodepool), daemons), claims)
    spec: dict[str, Any] = {
        "nodeClassRef": tspec.get("nodeClassRef"),
        "requirements": one_per_key(placed.requirements),  # as every provider reads them
    }
    for key in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if key in tspec:
            spec[key] = tspec[key]
    if sized.requests:
        spec["resources"] = {"requests": sized.manifest()}
    pool_name = str((nodepool.get("metadata") or {}).get("name", node.nodepool))
    owners, hashes = pool_membership(nodepool)
    metadata: dict[str, Any] = {
        "name": nodeclaim_name(event_id, node.name),
        "labels": {**dict(tmeta.get("labels") or {}), NODEPOOL_LABEL: pool_name},
        "annotations": {
            **dict(tmeta.get("annotations") or {}),
            **hashes,
            ann.LAUNCHED_FOR: event_id,
            ann.REPLACES: node.name,
        },
    }
    if owners:
        metadata["ownerReferences"] = owners
    manifest = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": metadata, "spec": spec}
    return manifest, "; ".join([*placed.reasons, sized.why])


#: The NodePool's hash of its template and the hash's version, which Karpenter writes on the
#: NodePool (pkg/controllers/nodepool/hash, ``Reconcile``) and on each NodeClaim it creates.
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"


def pool_membership(nodepool: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """What makes a NodeClaim one of ``nodepool``'s nodes, as Karpenter writes its own
    (kubernetes-sigs/karpenter v1.14.1 pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go,
    ``NewNodeClaimTemplate`` and ``ToNodeClaim``): an owner reference to the NodePool with
    ``blockOwnerDeletion: true`` and no ``controller`` (deleting the NodePool deletes the claim:
    kube-controller-manager's garbage collector), and the NodePool's ``nodepool-hash`` /
    ``nodepool-hash-version`` annotations, which its drift controller compares with the NodePool's
    own (pkg/controllers/nodeclaim/disruption/drift.go, ``areStaticFieldsDrifted``: a claim without
    them is never found drifted by a template change). A NodePool read without a UID (never from
    the API server) gets no owner reference; one without the annotations (Karpenter's hash
    controller has not run on it yet) passes none on."""
    meta = nodepool.get("metadata") or {}
    owners = []
    if meta.get("uid") and meta.get("name"):
        owners.append(
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "name": str(meta["name"]),
                "uid": str(meta["uid"]),
                "blockOwnerDeletion": True,
            }
        )
    annotations = meta.get("annotations") or {}
    hashes = {key: str(annotations[key]) for key in (NODEPOOL_HASH, NODEPOOL_HASH_VERSION) if annotations.get(key)}
    return owners, hashes
