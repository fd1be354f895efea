"""What Karpenter's controllers share: its label and annotation names, the action record, and the
small readers of pods, nodes and NodeClaims (``IsDoNotDisruptActive``, ``IsWaitingEviction``, …)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sim.actors.controllers import tolerates
from sim.apiserver.disruption import pdb_selects
from sim.clock import parse_rfc3339

Obj = dict[str, Any]

FINALIZER = "karpenter.sh/termination"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT: Obj = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
EXCLUDE_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
GPU = "nvidia.com/gpu"
INSTANCE_TYPE, ZONE = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone"
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
MIN_DRAIN_SECONDS = 5.0
EVICTION_BASE_DELAY, EVICTION_MAX_DELAY = 0.1, 10.0
MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
CRITICAL = ("system-cluster-critical", "system-node-critical")
#: GPUs per instance type, for the scheduling simulation (default 8)
GPUS = {"g5.xlarge": 1, "g5.2xlarge": 1, "g5.12xlarge": 4, "g6.12xlarge": 4, "g6e.12xlarge": 4, "g5.48xlarge": 8}
USER_AGENT = "karpenter/v1.8.0 (kubesim)"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODES = "/api/v1/nodes"
PDBS = "/apis/policy/v1/poddisruptionbudgets"


def pod_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}"


@dataclass(frozen=True)
class KarpenterAction:
    """One thing Karpenter did (or tried), on the sim clock."""

    at: datetime
    type: str  # nodeclaim-deleted, node-deleted, tainted, evicted, eviction-blocked, force-deleted, drained,
    # instance-terminating, node-finalized, nodeclaim-finalized, nodeclaim-created, launched, pod-gc
    target: str  # "ns/pod", node or NodeClaim name
    detail: str = ""
    #: evicted: the pod's resourceVersion the eviction was decided on (what a test's witness compares
    #: with another writer's, e.g. gpuwarden's do-not-disrupt mark); "" otherwise
    decided_on: str = ""


def go_duration(text: str) -> timedelta:
    """A Go ``time.ParseDuration`` string ("90s", "1h30m", "2m0.5s") as a timedelta."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return timedelta(seconds=sum(float(n) * units[u] for n, u in parts))


def meta_of(obj: Obj) -> Obj:
    return dict(obj.get("metadata") or {})


def pod_key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def owned_by(pod: Obj, api_version: str, kind: str) -> bool:
    return any(
        r.get("apiVersion") == api_version and r.get("kind") == kind for r in meta_of(pod).get("ownerReferences") or []
    )


def terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def terminating(pod: Obj) -> bool:
    return bool(meta_of(pod).get("deletionTimestamp"))


def active(pod: Obj) -> bool:
    return not terminal(pod) and not terminating(pod)


def mirror(pod: Obj) -> bool:
    return owned_by(pod, "v1", "Node")


def daemon(pod: Obj) -> bool:
    return owned_by(pod, "apps/v1", "DaemonSet")


def tolerates_disrupted(pod: Obj) -> bool:
    return tolerates(pod, DISRUPTED_TAINT)


def do_not_disrupt_ends(pod: Obj) -> datetime | None:
    """When a duration-valued ``karpenter.sh/do-not-disrupt`` stops holding the pod (None: it does
    not end by time: absent, "true", invalid, or the pod has not started)."""
    value = (meta_of(pod).get("annotations") or {}).get(DO_NOT_DISRUPT)
    started = (pod.get("status") or {}).get("startTime")
    if value is None or value == "true" or started is None:
        return None
    try:
        span = go_duration(value)
    except ValueError:
        return None
    return parse_rfc3339(started) + span if span > timedelta(0) else None


def do_not_disrupt_active(pod: Obj, now: datetime) -> bool:
    """``IsDoNotDisruptActive``: "true", or a positive duration not yet outlived by the pod."""
    value = (meta_of(pod).get("annotations") or {}).get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    try:
        span = go_duration(value)
    except ValueError:
        return False  # an invalid value counts as absent
    started = (pod.get("status") or {}).get("startTime")
    return span > timedelta(0) and (started is None or now - parse_rfc3339(started) < span)


def drainable(pod: Obj, now: datetime) -> bool:
    """``IsWaitingEviction``: not terminal, not tolerating the disrupted taint, not stuck
    terminating (over a minute past its deletionTimestamp), not a mirror pod."""
    stuck = terminating(pod) and now - parse_rfc3339(meta_of(pod)["deletionTimestamp"]) > timedelta(minutes=1)
    return not terminal(pod) and not tolerates_disrupted(pod) and not stuck and not mirror(pod)


def evictable(pod: Obj, now: datetime) -> bool:
    return active(pod) and not tolerates_disrupted(pod) and not mirror(pod) and not do_not_disrupt_active(pod, now)


def fully_blocked(pod: Obj, pdbs: list[Obj], now: datetime) -> bool:
    """``Limits.isFullyBlocked`` (pkg/utils/pdb/pdb.go): an evictable pod under more than one PDB, or
    under one with ``maxUnavailable`` 0 / "0%" or ``minAvailable`` "100%" (unless that PDB's
    ``unhealthyPodEvictionPolicy: AlwaysAllow`` lets an unready pod go)."""
    if not evictable(pod, now):
        return False
    matching = [p for p in pdbs if pdb_selects(p, pod)]
    if len(matching) > 1:
        return True
    for pdb in matching:
        spec = pdb.get("spec") or {}
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" and not _ready(pod):
            return False
        max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_unavailable in (0, "0%") or min_available == "100%":
            return True
    return False


def _ready(pod: Obj) -> bool:
    """Not explicitly unready: Karpenter lets an unhealthy pod go only on a Ready condition False."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Ready" and c.get("status") == "False" for c in conditions)


def currently_reschedulable(pod: Obj, now: datetime, pdbs: list[Obj]) -> bool:
    """``Limits.IsCurrentlyReschedulable`` (pkg/utils/pdb/pdb.go, v1.14.1): a deleting node's pod the
    provisioner schedules elsewhere: ``IsReschedulable`` (active, or a terminating StatefulSet pod;
    no DaemonSet or mirror pod), ``IsDisruptable`` (no active do-not-disrupt) and not fully blocked
    by a PDB. "Since Karpenter doesn't know when these pods will be successfully evicted, spinning
    up capacity until these pods are evicted is wasteful" (its comment)."""
    sts = owned_by(pod, "apps/v1", "StatefulSet")
    reschedulable = (active(pod) or (sts and terminating(pod))) and not daemon(pod) and not mirror(pod)
    disruptable = not active(pod) or not do_not_disrupt_active(pod, now)
    return bool(reschedulable) and disruptable and not fully_blocked(pod, pdbs, now)


def needs_force_delete(pod: Obj, deadline: datetime | None, now: datetime) -> bool:
    """Delete (not evict) once the pod's own grace would outlast the termination timestamp."""
    if deadline is None:
        return False
    if terminating(pod):
        return parse_rfc3339(meta_of(pod)["deletionTimestamp"]) > deadline
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return grace is not None and now > deadline - timedelta(seconds=int(grace))


def gpu_request(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += int((res.get("requests") or {}).get(GPU) or (res.get("limits") or {}).get(GPU) or 0)
    return total


def instance_id(provider_id: str) -> str:
    return provider_id.rsplit("/", 1)[-1]


def requirements(spec: Obj) -> dict[str, list[str]]:
    """Per key with an `In`, the values every requirement on it allows: the `In`s intersected, less
    the `NotIn`s (requirements are ANDed: karpenter pkg/scheduling `Requirements.Add`)."""
    allowed: dict[str, list[str]] = {}
    for r in spec.get("requirements") or []:
        if r.get("operator") == "In":
            values = [str(v) for v in r.get("values") or []]
            allowed[r["key"]] = [v for v in allowed[r["key"]] if v in values] if r["key"] in allowed else values
    return {k: [v for v in vs if v not in excluded(spec, k)] for k, vs in allowed.items()}


def excluded(spec: Obj, key: str) -> set[str]:
    return {
        str(v)
        for r in spec.get("requirements") or []
        if r.get("key") == key and r.get("operator") == "NotIn"
        for v in r.get("values") or []
    }
