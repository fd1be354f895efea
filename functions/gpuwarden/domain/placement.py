"""Where a replacement NodeClaim may land (pure): the NodePool's requirements, the moved pods' own
constraints, their gang's zone, and the steering away from the interrupted capacity pool.

docs/cluster.md ("Where the replacement lands") says it for users. Karpenter's NodeClaim
requirements take the operators In, NotIn, Exists, DoesNotExist, Gt, Lt (Gte, Lte since v1.6)
and an optional `minValues`; requirements are ANDed, so a value set per key is the intersection
of its `In`s minus its `NotIn`s, and a key with `minValues: n` needs n values left after all of
them (Karpenter's `scheduling.Requirements`, kubernetes-sigs/karpenter pkg/scheduling).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwarden.domain.predicates import requirement_matches, tolerates
from gpuwarden.domain.views import (
    CAPACITY_TYPE_LABEL,
    NODEPOOL_LABEL,
    NodeSelectorRequirement,
    PodView,
    Taint,
)

Req = dict[str, Any]
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Karpenter (AWS provider) labels every node it launches with its GPU's name ("a100", "h100").
GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
#: The NodeClaim CRD's CEL rule: the karpenter.sh label domain is Karpenter's own, but these two.
_KARPENTER_KEYS_ALLOWED = (CAPACITY_TYPE_LABEL, NODEPOOL_LABEL)


def restricted(key: str) -> str | None:
    """Why a NodeClaim cannot carry a requirement on ``key`` (None: it can)."""
    if key == HOSTNAME_LABEL:
        return 'label "kubernetes.io/hostname" is restricted (it names the node being replaced)'
    domain = key.split("/", 1)[0] if "/" in key else ""
    if domain.endswith("karpenter.sh") and key not in _KARPENTER_KEYS_ALLOWED:
        return 'label domain "karpenter.sh" is restricted'
    return None


# ----------------------------------------------------------------------------- value sets


@dataclass(frozen=True)
class Values:
    """What a set of requirements allows for one key."""

    #: the allowed values (None: any value but ``excluded``)
    only: tuple[str, ...] | None
    excluded: frozenset[str]
    min_values: int

    @property
    def empty(self) -> bool:
        return self.only is not None and not self.only

    def allows(self, value: str) -> bool:
        return value not in self.excluded and (self.only is None or value in self.only)

    def room_without(self, value: str) -> bool:
        """Another value than ``value`` is left, and as many as ``minValues`` asks."""
        if self.only is None:
            return True
        return len([v for v in self.only if v != value]) >= max(1, self.min_values)


def values_for(requirements: Iterable[Mapping[str, Any]], key: str) -> Values:
    only: list[str] | None = None
    excluded: set[str] = set()
    min_values = 0
    for req in requirements:
        if req.get("key") != key:
            continue
        values = [str(v) for v in req.get("values") or ()]
        if req.get("operator") == "In":
            only = values if only is None else [v for v in only if v in values]
        elif req.get("operator") == "NotIn":
            excluded.update(values)
        min_values = max(min_values, int(req.get("minValues") or 0))
    kept = None if only is None else tuple(v for v in only if v not in excluded)
    return Values(kept, frozenset(excluded), min_values)


def conflict(requirements: Sequence[Mapping[str, Any]]) -> str | None:
    """The first key no value can satisfy (an In set emptied by the others), or None."""
    for key in dict.fromkeys(str(r.get("key")) for r in requirements):
        values = values_for(requirements, key)
        if values.empty or (values.only is not None and 0 < len(values.only) < values.min_values):
            return f"no value of {key} satisfies both the NodePool and the pods"
        operators = {r.get("operator") for r in requirements if r.get("key") == key}
        if "DoesNotExist" in operators and operators & {"In", "Exists", "Gt", "Lt", "Gte", "Lte"}:
            return f"{key} is required both to exist and not to exist"
    return None


_SET_OPERATORS = frozenset({"In", "NotIn", "Exists"})


def one_per_key(requirements: Sequence[Mapping[str, Any]]) -> list[Req]:
    """The same requirements with one per key where they are sets of values (In, NotIn, Exists):
    the `In`s intersected less the `NotIn`s, as one `In` (else one `NotIn` of every excluded value,
    else `Exists`), keeping the largest `minValues`. Karpenter ANDs requirements on one key
    (pkg/scheduling `Requirements.Add`), so this changes nothing there; but a provider may read one
    requirement per key only (Karpenter's KWOK provider takes the first `instance-type` one and
    launched the very type a `NotIn` beside it excluded: docs/realplane.md, "Findings")."""
    out: list[Req] = []
    done: set[str] = set()
    for req in requirements:
        key = str(req.get("key"))
        same = [r for r in requirements if r.get("key") == key]
        if len(same) == 1 or not {r.get("operator") for r in same} <= _SET_OPERATORS:
            out.append(dict(req))
            continue
        if key in done:
            continue
        done.add(key)
        values = values_for(same, key)
        merged: Req = {"key": key}
        if values.only is not None:
            merged |= {"operator": "In", "values": list(values.only)}
        elif values.excluded:
            merged |= {"operator": "NotIn", "values": sorted(values.excluded)}
        else:
            merged["operator"] = "Exists"
        if values.min_values:
            merged["minValues"] = values.min_values
        out.append(merged)
    return out


# ----------------------------------------------------------------------------- the pods' side


def chosen_term(pod: PodView, node_labels: Mapping[str, str]) -> tuple[NodeSelectorRequirement, ...]:
    """Of the pod's required node affinity terms (ORed), the one the node it runs on matches (it
    was scheduled by it); the first when none does any more (its labels changed since)."""
    for term in pod.required_node_affinity:
        if all(requirement_matches(e, node_labels) for e in term):
            return term
    return pod.required_node_affinity[0] if pod.required_node_affinity else ()


def pod_requirements(pod: PodView, node_labels: Mapping[str, str]) -> tuple[list[Req], list[str]]:
    """The pod's nodeSelector and chosen affinity term as NodeClaim requirements, and what was left
    out (restricted keys) with why."""
    wanted: list[Req] = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pod.node_selector.items())]
    wanted += [
        {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
        for e in chosen_term(pod, node_labels)
        if e.key and e.operator
    ]
    kept: list[Req] = []
    dropped: list[str] = []
    for req in wanted:
        why = restricted(req["key"])
        if why is None:
            kept.append(req)
        else:
            dropped.append(f"{pod.key}: {req['key']} left out: {why}")
    return kept, dropped


def untolerated(pod: PodView, taints: Iterable[Taint]) -> list[Taint]:
    """The taints that would keep the pod off the node (PreferNoSchedule only discourages)."""
    return [t for t in taints if t.effect != "PreferNoSchedule" and not tolerates(pod.tolerations, t)]


def gang_zone(zones: Iterable[str]) -> str | None:
    """Where most of the gang's other nodes run (ties: the first name, for one answer per input)."""
    counts = Counter(z for z in zones if z)
    if not counts:
        return None
    return min(counts, key=lambda z: (-counts[z], z))
