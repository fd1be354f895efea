"""Kubernetes Events gpuwarden posts: core/v1 Events in ``default`` (the namespace of Events
about cluster-scoped objects such as Nodes and NodePools)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def event_body(involved: Mapping[str, Any], reason: str, message: str, warning: bool) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{uuid.uuid4().hex[:16]}", "namespace": "default"},
        "involvedObject": dict(involved),
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "gpuwarden"},
        "reportingComponent": "gpuwarden",
        "reportingInstance": "gpuwarden",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def nodepool_ref(nodepool: Mapping[str, Any]) -> dict[str, Any]:
    """The ``involvedObject`` of an Event about a Karpenter NodePool."""
    meta = nodepool.get("metadata") or {}
    ref = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": meta.get("name")}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref
