"""Server-side printing: ``meta.k8s.io/v1 Table`` answers for kubectl's ``get`` (nodes, pods)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sim.apiserver.registry import ResourceType
from sim.clock import parse_rfc3339

Obj = dict[str, Any]


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m, h, d = s // 60, s // 3600, s // 86400
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 192:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 730:
        return f"{d}d"
    return f"{d // 365}y{d % 365}d" if d < 365 * 8 else f"{d // 365}y"


def _age(obj: Obj, now: datetime) -> str:
    created = obj["metadata"].get("creationTimestamp")
    return human_duration((now - parse_rfc3339(created)).total_seconds()) if created else "<unknown>"


def _col(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": name, "priority": priority}


def _node_row(node: Obj, now: datetime) -> list[Any]:
    conds = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    status = "Ready" if conds.get("Ready") == "True" else "NotReady" if "Ready" in conds else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(
        k.split("/", 1)[1] for k in node["metadata"].get("labels") or {} if k.startswith("node-role.kubernetes.io/")
    )
    info = (node.get("status") or {}).get("nodeInfo") or {}
    ip = next(
        (a["address"] for a in (node.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"),
        "<none>",
    )
    return [
        node["metadata"]["name"],
        status,
        ",".join(roles) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        ip,
        "<none>",
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _pod_row(pod: Obj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    phase = status.get("reason") or status.get("phase") or "Unknown"
    if pod["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        phase,
        restarts,
        _age(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


COLUMNS = {
    "nodes": [
        _col("Name", fmt="name"),
        _col("Status"),
        _col("Roles"),
        _col("Age"),
        _col("Version"),
        _col("Internal-IP", priority=1),
        _col("External-IP", priority=1),
        _col("OS-Image", priority=1),
        _col("Kernel-Version", priority=1),
        _col("Container-Runtime", priority=1),
    ],
    "pods": [
        _col("Name", fmt="name"),
        _col("Ready"),
        _col("Status"),
        _col("Restarts", "string"),
        _col("Age"),
        _col("IP", priority=1),
        _col("Node", priority=1),
        _col("Nominated Node", priority=1),
        _col("Readiness Gates", priority=1),
    ],
}
ROWS = {"nodes": _node_row, "pods": _pod_row}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def to_table(rtype: ResourceType, items: list[Obj], resource_version: str, now: datetime) -> Obj | None:
    """A Table for nodes and pods; None for other kinds (plain JSON, kubectl prints NAME/AGE)."""
    if rtype.key not in ROWS:
        return None
    row = ROWS[rtype.key]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": COLUMNS[rtype.key],
        "rows": [
            {
                "cells": row(obj, now),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
            for obj in items
        ],
    }
