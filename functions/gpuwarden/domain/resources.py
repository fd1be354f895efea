"""Readers of the Kubernetes JSON that the views keep (pure): extended resources, a pod's
effective requests, its DRA ResourceClaims and its PersistentVolumeClaims."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwarden.domain.quantity import parse_quantity


def extended(resources: object) -> dict[str, int]:
    """The extended resources (``vendor/name``) of a resource list that are whole numbers."""
    found: dict[str, int] = {}
    for name, value in resources.items() if isinstance(resources, Mapping) else ():
        if "/" not in str(name):  # cpu, memory, pods …: not parsed (a node's list is mostly these)
            continue
        amount = parse_quantity(value)
        if amount is not None and amount.denominator == 1:
            found[str(name)] = int(amount)
    return found


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    # an extended resource's request defaults to its limit (the API server sets it so)
    return extended(resources.get("limits") or {}) | extended(resources.get("requests") or {})


def extended_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Kubernetes' effective requests (resourcehelper.PodRequests) of the extended resources:
    per resource, the larger of the containers' sum (plus restartable init containers) and each
    init container with the restartable ones started before it."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for init in spec.get("initContainers") or ():
        asked = _container_requests(init)
        if init.get("restartPolicy") == "Always":
            for name, n in asked.items():
                sidecars[name] = sidecars.get(name, 0) + n
            continue
        for name, n in asked.items():
            peak[name] = max(peak.get(name, 0), n + sidecars.get(name, 0))
    for container in spec.get("containers") or ():
        for name, n in _container_requests(container).items():
            total[name] = total.get(name, 0) + n
    for name, n in sidecars.items():
        total[name] = total.get(name, 0) + n
    return {name: max(total.get(name, 0), peak.get(name, 0)) for name in total.keys() | peak.keys()}


def resource_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[str, ...]:
    named = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    found = []
    for claim in spec.get("resourceClaims") or ():
        name = named.get(str(claim.get("name"))) or claim.get("resourceClaimName")
        if name:
            found.append(str(name))
    return tuple(found)


def volume_claims(name: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    found = []
    for volume in spec.get("volumes") or ():
        if (volume.get("persistentVolumeClaim") or {}).get("claimName"):
            found.append(str(volume["persistentVolumeClaim"]["claimName"]))
        elif volume.get("ephemeral") is not None:
            found.append(f"{name}-{volume.get('name')}")
    return tuple(found)
