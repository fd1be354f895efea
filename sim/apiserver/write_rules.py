"""What a create must name, what a write may change and what a delete must check, as kube-apiserver's generic registry
decides: the status subresource, the system metadata a client cannot set, DeleteOptions
preconditions, a pod's grace period."""

from __future__ import annotations

from typing import Any

from sim.apiserver import errors
from sim.apiserver.jsondoc import clone
from sim.apiserver.registry import ResourceType

Obj = dict[str, Any]
DEFAULT_GRACE = 30


def merge_subresource(current: Obj, new: Obj, subresource: str | None, rtype: ResourceType) -> Obj:
    """``status``: only the status changes; main resource of a type with a status
    subresource: the status is kept (as the real strategies do); ``"*"``: anything goes."""
    if subresource == "*":
        return new
    if subresource == "status":
        merged = clone(current)
        if "status" in new:
            merged["status"] = new["status"]
        else:
            merged.pop("status", None)
        merged["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return merged
    if any(sub == "status" for sub, _, _ in rtype.subresources):
        if "status" in current:
            new["status"] = clone(current["status"])
        else:
            new.pop("status", None)
    return new


def keep_system_meta(current: Obj, new: Obj, rtype: ResourceType) -> None:
    meta, old = new["metadata"], current["metadata"]
    for field in (
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ):
        if field in old:
            meta[field] = old[field]
        else:
            meta.pop(field, None)
    meta["resourceVersion"] = old["resourceVersion"]
    new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
    if not rtype.namespaced:
        meta.pop("namespace", None)


def deletion_grace(pod: Obj, grace_seconds: int | None) -> int:
    if grace_seconds is None:
        value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace_seconds = DEFAULT_GRACE if value is None else int(value)
    return 1 if int(grace_seconds) < 0 else int(grace_seconds)  # "negative values are treated as 1s"


def check_preconditions(rtype: ResourceType, current: Obj, pre: Obj) -> None:
    """DeleteOptions preconditions, as the API server's `rest.BeforeDelete` checks them (for a
    DELETE and for an eviction's delete alike): 409 Conflict naming the resource by its Kind."""
    meta = current["metadata"]
    name = meta["name"]
    if pre.get("uid") and pre["uid"] != meta["uid"]:
        why = (
            f"the UID in the precondition ({pre['uid']}) does not match the UID in record ({meta['uid']}). "
            "The object might have been deleted and then recreated"
        )
    elif pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
        why = (
            f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the "
            f"ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified"
        )
    else:
        return
    resource = f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind
    details = {"name": name, "kind": rtype.kind, **({"group": rtype.group} if rtype.group else {})}
    raise errors.ApiError(409, f'Operation cannot be fulfilled on {resource} "{name}": {why}', "Conflict", details)


def prepare_namespace(rtype: ResourceType, namespace: str | None, meta: Obj) -> str:
    if not rtype.namespaced:
        meta.pop("namespace", None)
        return ""
    ns = namespace or meta.get("namespace") or "default"
    if meta.get("namespace") and meta["namespace"] != ns:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = ns
    return str(ns)
