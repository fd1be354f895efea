"""Readers of the Kubernetes JSON that the views keep (pure): extended resources, a pod's
effective requests, its DRA ResourceClaims and its PersistentVolumeClaims."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
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


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    # a request defaults to its limit (the API server sets it so on a pod; Karpenter does the same
    # for a DaemonSet's template: pkg/utils/daemonset ``mergeResourceLimitsIntoRequests``)
    return quantities(resources.get("limits")) | quantities(resources.get("requests"))


def quantities(resources: object) -> dict[str, Fraction]:
    """Every entry of a resource list that reads as a quantity, exactly."""
    found: dict[str, Fraction] = {}
    for name, value in resources.items() if isinstance(resources, Mapping) else ():
        amount = parse_quantity(value)
        if amount is not None:
            found[str(name)] = amount
    return found


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, n in more.items():
        total[name] = total.get(name, Fraction(0)) + n


#: The resources a pod may request at pod level (``spec.resources``, PodLevelResources):
#: k8s.io/component-helpers resource ``IsSupportedPodLevelResource``.
_POD_LEVEL = ("cpu", "memory")


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """Kubernetes' effective requests of a pod, every resource, exactly as kube-scheduler counts
    them (k8s.io/component-helpers v0.35 resource ``PodRequests`` / ``AggregateContainerRequests``,
    which Karpenter's ``resources.Ceiling`` calls): per resource, the larger of the containers' sum
    (plus the restartable init containers: sidecars) and each init container with the sidecars
    started before it; pod-level ``spec.resources.requests`` replace the containers' for cpu and
    memory (and hugepages); ``spec.overhead`` (RuntimeClass) is added."""
    total: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for container in spec.get("containers") or ():
        _add(total, _container_requests(container))
    for init in spec.get("initContainers") or ():
        asked = _container_requests(init)
        if init.get("restartPolicy") == "Always":  # a sidecar: runs beside the containers
            _add(total, asked)
            _add(sidecars, asked)
            asked = dict(sidecars)
        else:  # runs alone, beside the sidecars started before it
            _add(asked, sidecars)
        for name, n in asked.items():
            peak[name] = max(peak.get(name, Fraction(0)), n)
    out = {name: max(total.get(name, Fraction(0)), peak.get(name, Fraction(0))) for name in total.keys() | peak.keys()}
    level = quantities((spec.get("resources") or {}).get("requests"))
    out |= {name: n for name, n in level.items() if name in _POD_LEVEL or name.startswith("hugepages-")}
    _add(out, quantities(spec.get("overhead")))
    return dict(sorted(out.items()))


def extended_of(requests: Mapping[str, Fraction]) -> dict[str, int]:
    """The extended resources (``vendor/name``) of `pod_requests` that are whole numbers."""
    return {name: int(n) for name, n in requests.items() if "/" in name and n.denominator == 1}


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
