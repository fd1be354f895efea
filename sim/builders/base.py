"""What every builder shares: the GPU resource and taint, stable uids and IPs, owner references."""

from __future__ import annotations

import hashlib
import ipaddress
import uuid
from typing import Any

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
CREATED = "2025-01-01T00:00:00Z"


def region_of(zone: str) -> str:
    return zone[:-1] if zone[-1].isalpha() else zone


def ip_for(name: str, base: str = "10.0.0.0/16") -> str:
    net = ipaddress.ip_network(base)
    offset = int(hashlib.sha256(name.encode()).hexdigest(), 16) % (net.num_addresses - 2) + 1
    return str(net.network_address + offset)


def uid_for(kind: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim/{kind}/{name}"))


def owner_ref(owner: Obj | tuple[str, str, str], controller: bool = True) -> Obj:
    """An ownerReference to a stored object, or to (apiVersion, kind, name)."""
    if isinstance(owner, tuple):
        api_version, kind, name = owner
        uid = uid_for(kind, name)
    else:
        api_version, kind = owner["apiVersion"], owner["kind"]
        name, uid = owner["metadata"]["name"], owner["metadata"].get("uid") or uid_for(owner["kind"], name)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }
