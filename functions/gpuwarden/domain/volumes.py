"""Zonal volumes (docs/cluster.md, "Volumes"): a displaced pod whose PersistentVolumeClaim is bound
to a PersistentVolume with a zonal node affinity can only run in that zone, so its replacement
(a gang's too) is pinned there; where the NodePool leaves no room in that zone, there is no
replacement, and the reason says why. Pure: small views of PVs and PVCs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwarden.domain.errors import NoFittingReplacement
from gpuwarden.domain.placement import Req, values_for
from gpuwarden.domain.views import ZONE_LABEL, PodView

#: The node labels a PV's node affinity names a zone by: Kubernetes' own, the EBS CSI driver's,
#: and the deprecated beta label older in-tree EBS volumes still carry.
ZONE_KEYS = (ZONE_LABEL, "topology.ebs.csi.aws.com/zone", "failure-domain.beta.kubernetes.io/zone")


@dataclass(frozen=True)
class VolumeView:
    """A PersistentVolume: the zones its required node affinity allows (None: not zonal)."""

    name: str
    zones: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ClaimView:
    """A PersistentVolumeClaim: the volume it is bound to (None: not bound yet)."""

    namespace: str
    name: str
    volume: str | None = None


def _term_zones(term: Mapping[str, Any]) -> set[str] | None:
    """The zones one node-selector term allows (None: it says nothing of zones)."""
    found: set[str] | None = None
    for expression in term.get("matchExpressions") or ():
        if expression.get("key") in ZONE_KEYS and expression.get("operator") == "In":
            values = {str(v) for v in expression.get("values") or ()}
            found = values if found is None else found & values
    return found


def pv_from_json(obj: Mapping[str, Any]) -> VolumeView:
    """Terms are ORed: the volume's zones are the union of its terms' (any term without a zone
    leaves it unpinned)."""
    meta = obj.get("metadata") or {}
    required = (((obj.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
    zones: set[str] = set()
    for term in required or ():
        found = _term_zones(term)
        if found is None:
            return VolumeView(str(meta.get("name", "")))
        zones |= found
    return VolumeView(str(meta.get("name", "")), tuple(sorted(zones)) if required else None)


def pvc_from_json(obj: Mapping[str, Any]) -> ClaimView:
    meta = obj.get("metadata") or {}
    volume = (obj.get("spec") or {}).get("volumeName")
    return ClaimView(str(meta.get("namespace", "default")), str(meta.get("name", "")), str(volume) if volume else None)


@dataclass(frozen=True)
class VolumePin:
    """Where the pods' volumes let them run: ``zones`` (None: anywhere), and why."""

    zones: tuple[str, ...] | None
    reasons: tuple[str, ...] = ()


def volume_pin(pods: Sequence[PodView], claims: Sequence[ClaimView], volumes: Sequence[VolumeView]) -> VolumePin:
    """The zones every pod's bound, zonal volumes allow together. Raises `NoFittingReplacement`
    when they allow none in common (no one replacement can hold those pods)."""
    by_claim = {(c.namespace, c.name): c for c in claims}
    by_name = {v.name: v for v in volumes}
    zones: set[str] | None = None
    reasons: list[str] = []
    for pod in pods:
        for claim_name in pod.volume_claims:
            claim = by_claim.get((pod.namespace, claim_name))
            volume = by_name.get(claim.volume or "") if claim is not None else None
            if volume is None or volume.zones is None:
                continue
            reasons.append(f"{pod.key}'s volume {claim_name} ({volume.name}) is in {', '.join(volume.zones)}")
            zones = set(volume.zones) if zones is None else zones & set(volume.zones)
            if not zones:
                raise NoFittingReplacement(f"the pods' volumes share no zone ({'; '.join(reasons)})")
    return VolumePin(None if zones is None else tuple(sorted(zones)), tuple(reasons))


def pod_zones(
    pods: Sequence[PodView], claims: Sequence[ClaimView], volumes: Sequence[VolumeView]
) -> dict[str, tuple[str, ...]]:
    """Pod key → the zones its bound, zonal volumes allow (pods without one are left out); a pod
    whose volumes share no zone gets none (it can run nowhere)."""
    pins: dict[str, tuple[str, ...]] = {}
    for pod in pods:
        try:
            found = volume_pin([pod], claims, volumes)
        except NoFittingReplacement:
            pins[pod.key] = ()
            continue
        if found.zones is not None:
            pins[pod.key] = found.zones
    return pins


def pin_to_volumes(requirements: Sequence[Mapping[str, Any]], pin: VolumePin) -> list[Req]:
    """``requirements`` held to the volumes' zones. Raises `NoFittingReplacement` when the NodePool
    (with the pods' own constraints) allows none of them."""
    if pin.zones is None:
        return [dict(r) for r in requirements]
    allowed = values_for(requirements, ZONE_LABEL)
    zones = [z for z in pin.zones if allowed.allows(z)]
    if not zones:
        excluded = ", ".join(sorted(allowed.excluded))
        where = ", ".join(allowed.only or ()) if allowed.only is not None else f"any zone but {excluded}"
        raise NoFittingReplacement(
            f"the pods' volumes keep them in {', '.join(pin.zones)}; the NodePool and the pods allow {where}"
        )
    return [*(dict(r) for r in requirements), {"key": ZONE_LABEL, "operator": "In", "values": zones}]
