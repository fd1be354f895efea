"""The object store: one global resourceVersion counter, generic CRUD, graceful deletion.

All reads return deep copies; all writes happen under one lock that is never held while
sleeping or calling out. Change listeners run after the lock is released, in the writer's
thread, so they may write to the store themselves.

Objects are JSON documents, so a copy is `sim.apiserver.jsondoc.clone`, not `copy.deepcopy`. A type's
`indexed` fields (pods by ``spec.nodeName``) are kept in an index, as kube-apiserver's watch
cache keeps them, so a kubelet-style list of one node's pods does not scan every pod.
"""

from __future__ import annotations

import builtins
import collections
import json
import queue
import re
import secrets
import string
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sim.apiserver import errors
from sim.apiserver.jsondoc import clone
from sim.apiserver.registry import Registry, ResourceType
from sim.apiserver.selectors import field_value
from sim.apiserver.write_rules import (
    check_preconditions,
    deletion_grace,
    keep_system_meta,
    merge_subresource,
    prepare_namespace,
)
from sim.clock import SimClock, rfc3339

Obj = dict[str, Any]
ChangeListener = Callable[[str, str, Obj], None]  # (kind, event type, object)
ObjKey = tuple[str, str, str]  # (type key, namespace, name)
BucketKey = tuple[str, str]  # (namespace, name)


def encoded(obj: Obj) -> str:
    """The compact JSON the server sends."""
    return json.dumps(obj, separators=(",", ":"))


_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
GENERATION_GROUPS = ("apps", "batch", "policy", "karpenter.sh")


@dataclass
class Watcher:
    rtype: ResourceType
    namespace: str | None
    events: queue.Queue[tuple[str, Obj] | None]


class Store:
    def __init__(self, registry: Registry, clock: SimClock) -> None:
        self.registry = registry
        self.clock = clock
        self._lock = threading.RLock()
        self._objects: dict[str, dict[BucketKey, Obj]] = {t.key: {} for t in registry.types}
        #: (type key, field path) → field value → the objects that have it
        self._index: dict[tuple[str, str], dict[str, set[BucketKey]]] = {
            (t.key, path): {} for t in registry.types for path in t.indexed
        }
        self._deadlines: dict[ObjKey, datetime] = {}
        self._rv = 0
        self._listeners: list[ChangeListener] = []
        self._watchers: list[Watcher] = []
        self._history: collections.deque[tuple[int, str, str, Obj]] = collections.deque(maxlen=5000)
        self.deadline_changed = threading.Event()

    # ------------------------------------------------------------ plumbing

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def add_listener(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def watch(self, rtype: ResourceType, namespace: str | None, since: int | None = None) -> Watcher:
        """Subscribe to changes; ``since``: replay the recorded events after that resourceVersion
        (410 Expired when it is older than the history kept)."""
        watcher = Watcher(rtype, namespace, queue.Queue())
        with self._lock:
            if since is not None:
                if self._history and since < self._history[0][0] - 1:
                    raise errors.ApiError(410, f"too old resource version: {since} ({self._history[0][0]})", "Expired")
                for rv, key, event, obj in self._history:
                    if rv > since and key == rtype.key and namespace in (None, obj["metadata"].get("namespace")):
                        watcher.events.put((event, clone(obj)))
            self._watchers.append(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def _bump(self, obj: Obj) -> None:
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)

    def _emit(self, rtype: ResourceType, event: str, obj: Obj) -> None:
        self._history.append((self._rv, rtype.key, event, clone(obj)))
        for w in list(self._watchers):
            if w.rtype.key == rtype.key and w.namespace in (None, obj["metadata"].get("namespace")):
                w.events.put((event, clone(obj)))

    def _notify(self, rtype: ResourceType, event: str, obj: Obj) -> None:
        for listener in list(self._listeners):
            listener(rtype.kind, event, clone(obj))

    def _bucket(self, rtype: ResourceType) -> dict[BucketKey, Obj]:
        return self._objects[rtype.key]

    def _put(self, rtype: ResourceType, key: BucketKey, obj: Obj) -> None:
        """Store ``obj`` under ``key`` (every write goes through here and `_drop`: the indexes follow)."""
        bucket = self._bucket(rtype)
        self._unindex(rtype, key, bucket.get(key))
        bucket[key] = obj
        for path in rtype.indexed:
            self._index[(rtype.key, path)].setdefault(field_value(obj, path), set()).add(key)

    def _drop(self, rtype: ResourceType, key: BucketKey) -> Obj:
        obj = self._bucket(rtype).pop(key)
        self._unindex(rtype, key, obj)
        return obj

    def _unindex(self, rtype: ResourceType, key: BucketKey, obj: Obj | None) -> None:
        if obj is None:
            return
        for path in rtype.indexed:
            keys = self._index[(rtype.key, path)].get(field_value(obj, path))
            if keys is not None:
                keys.discard(key)

    @staticmethod
    def _ns(rtype: ResourceType, namespace: str | None) -> str:
        return (namespace or "") if rtype.namespaced else ""

    # ------------------------------------------------------------ reads

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        with self._lock:
            obj = self._bucket(rtype).get((self._ns(rtype, namespace), name))
            if obj is None:
                raise errors.not_found(rtype.plural, name, rtype.group)
            return clone(obj)

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.get(rtype, namespace, name)
        except errors.ApiError:
            return None

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        predicate: Callable[[Obj], bool] | None = None,
        indexed: tuple[str, str] | None = None,
        render: Callable[[Obj], Any] = clone,
        page: Callable[[builtins.list[BucketKey]], builtins.list[BucketKey]] | None = None,
    ) -> tuple[builtins.list[Any], str]:
        """The objects ``predicate`` accepts, in (namespace, name) order, each a copy (``render``: made
        under the lock from the stored object instead, e.g. `encoded`, the compact JSON the server
        sends: no copy to serialize). ``indexed`` (a field path and value the predicate requires, on
        one of the type's indexed fields) narrows the scan; ``page`` cuts the selected keys (`paging.Page`)."""
        with self._lock:
            bucket = self._bucket(rtype)
            keys = self._select(rtype, namespace, predicate, indexed)
            return [render(bucket[key]) for key in (page(keys) if page else keys)], str(self._rv)

    def _select(
        self,
        rtype: ResourceType,
        namespace: str | None,
        predicate: Callable[[Obj], bool] | None,
        indexed: tuple[str, str] | None,
    ) -> builtins.list[BucketKey]:
        bucket = self._bucket(rtype)
        index = self._index.get((rtype.key, indexed[0])) if indexed else None
        keys = bucket.keys() if index is None or indexed is None else index.get(indexed[1], set())
        return sorted(
            key
            for key in keys
            if (not namespace or not rtype.namespaced or key[0] == namespace)
            and (predicate is None or predicate(bucket[key]))
        )

    # ------------------------------------------------------------ writes

    def create(self, rtype: ResourceType, namespace: str | None, obj: Obj) -> Obj:
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        ns = prepare_namespace(rtype, namespace, meta)
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        name = meta.get("name")
        if not name or not isinstance(name, str):
            raise errors.invalid(
                rtype.kind,
                "",
                rtype.group,
                [("metadata.name", "Required value: name or generateName is required")],
            )
        if not _NAME_RE.match(name) or len(name) > 253:
            raise errors.invalid(
                rtype.kind,
                name,
                rtype.group,
                [
                    (
                        "metadata.name",
                        f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                        "case alphanumeric characters, '-' or '.'",
                    )
                ],
            )
        with self._lock:
            bucket = self._bucket(rtype)
            if (ns, name) in bucket:
                raise errors.already_exists(rtype.plural, name, rtype.group)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = rfc3339(self.clock.now())
            if rtype.group in GENERATION_GROUPS:
                meta.setdefault("generation", 1)
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            self._bump(obj)
            self._put(rtype, (ns, name), obj)
            self._emit(rtype, "ADDED", obj)
            out = clone(obj)
        self._notify(rtype, "ADDED", out)
        return out

    def replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        new: Obj,
        subresource: str | None = None,
    ) -> Obj:
        """PUT semantics: a carried resourceVersion must match; ``status`` subresource keeps the rest."""
        return self.mutate(rtype, namespace, name, lambda _cur: new, subresource)

    def mutate(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        change: Callable[[Obj], Obj],
        subresource: str | None = None,
    ) -> Obj:
        """Apply ``change`` to a copy of the stored object and store the result atomically.

        The result's ``metadata.resourceVersion``, when present, is a precondition: it must
        equal the stored one (409 Conflict otherwise). Immutable metadata is kept.
        """
        ns = self._ns(rtype, namespace)
        with self._lock:
            bucket = self._bucket(rtype)
            current = bucket.get((ns, name))
            if current is None:
                raise errors.not_found(rtype.plural, name, rtype.group)
            new = change(clone(current))
            if not isinstance(new, dict):
                raise errors.bad_request("the body of the request was in an unknown format")
            meta = new.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise errors.bad_request("metadata must be an object")
            carried = meta.get("resourceVersion")
            if carried not in (None, "") and carried != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, name, rtype.group)
            if meta.get("name", name) != name:
                raise errors.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
                )
            if rtype.namespaced and meta.get("namespace", ns) != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            new = merge_subresource(current, new, subresource, rtype)
            keep_system_meta(current, new, rtype)
            if new == current:  # a no-op write does not bump resourceVersion (like the real server)
                return clone(current)
            if current.get("spec") != new.get("spec") and "generation" in current["metadata"]:
                new["metadata"]["generation"] = int(current["metadata"]["generation"]) + 1
            self._bump(new)
            key = (rtype.key, ns, name)
            if (
                new["metadata"].get("deletionTimestamp")
                and not new["metadata"].get("finalizers")
                and (key not in self._deadlines)
            ):
                self._drop(rtype, (ns, name))  # last finalizer removed from a terminating object
                self._emit(rtype, "DELETED", new)
                event = "DELETED"
            else:
                self._put(rtype, (ns, name), new)
                self._emit(rtype, "MODIFIED", new)
                event = "MODIFIED"
            out = clone(new)
        self._notify(rtype, event, out)
        return out

    # ------------------------------------------------------------ deletion

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        grace_seconds: int | None = None,
        preconditions: Obj | None = None,
    ) -> tuple[Obj, bool]:
        """Delete; returns (object, gone). Scheduled pods terminate gracefully on the sim clock."""
        ns = self._ns(rtype, namespace)
        with self._lock:
            bucket = self._bucket(rtype)
            current = bucket.get((ns, name))
            if current is None:
                raise errors.not_found(rtype.plural, name, rtype.group)
            check_preconditions(rtype, current, preconditions or {})
            graceful = rtype.key == "pods" and bool((current.get("spec") or {}).get("nodeName"))
            grace = deletion_grace(current, grace_seconds) if graceful else 0
            now = self.clock.now()
            key = (rtype.key, ns, name)
            meta = current["metadata"]
            if grace > 0 or meta.get("finalizers"):
                deadline = now + timedelta(seconds=grace)
                old = self._deadlines.get(key)
                if meta.get("deletionTimestamp") and (old is None or old <= deadline):
                    return clone(current), False  # already terminating sooner
                updated = clone(current)
                updated["metadata"]["deletionTimestamp"] = rfc3339(deadline)
                updated["metadata"]["deletionGracePeriodSeconds"] = grace
                if grace > 0:
                    self._deadlines[key] = deadline
                else:
                    self._deadlines.pop(key, None)
                self._bump(updated)
                self._put(rtype, (ns, name), updated)
                self._emit(rtype, "MODIFIED", updated)
                self.deadline_changed.set()
                out, event, gone = clone(updated), "MODIFIED", False
            else:
                out, event, gone = self._remove_locked(rtype, key), "DELETED", True
        self._notify(rtype, event, out)
        return out, gone

    def _remove_locked(self, rtype: ResourceType, key: ObjKey) -> Obj:
        obj = clone(self._drop(rtype, (key[1], key[2])))  # the stored one stays as readers hold it (`Api.list_shared`)
        self._deadlines.pop(key, None)
        self._bump(obj)
        self._emit(rtype, "DELETED", obj)
        return obj

    def next_deadline(self) -> datetime | None:
        with self._lock:
            return min(self._deadlines.values(), default=None)

    def reap(self) -> int:
        """Remove terminating objects whose grace period has passed on the sim clock."""
        now = self.clock.now()
        removed: list[tuple[ResourceType, Obj]] = []
        with self._lock:
            for key, deadline in list(self._deadlines.items()):
                if deadline > now:
                    continue
                rtype = next(t for t in self.registry.types if t.key == key[0])
                obj = self._bucket(rtype).get((key[1], key[2]))
                if obj is None:
                    self._deadlines.pop(key, None)
                elif obj["metadata"].get("finalizers"):
                    self._deadlines.pop(key, None)  # waits for its finalizers
                else:
                    removed.append((rtype, self._remove_locked(rtype, key)))
        for rtype, obj in removed:
            self._notify(rtype, "DELETED", obj)
        return len(removed)
