"""The API semantics shared by the HTTP server and the direct (in-process) methods:
validation, defaults, the three patch types, deletion options, PDB status on read."""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Callable
from typing import Any

from sim.apiserver import errors, karpenter_crds
from sim.apiserver.authz import Authorizer
from sim.apiserver.disruption import Disruption
from sim.apiserver.encodings import Encodings
from sim.apiserver.paging import Page, continue_metadata
from sim.apiserver.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from sim.apiserver.priority import admit_pod
from sim.apiserver.registry import Registry, ResourceType
from sim.apiserver.selectors import field_matcher, matches, parse_field_selector, parse_label_selector
from sim.apiserver.store import Obj, Store

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
#: kinds whose reads are computed, not stored: a PDB's status
DECORATED = frozenset({"PodDisruptionBudget"})


def _pod_defaults(pod: Obj, strict: bool) -> None:
    """Defaults the real API server applies; over HTTP the status starts as Pending (only the
    kubelet sets it), direct creates keep the given status (they play the kubelet's part)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    if strict:
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    else:
        pod.setdefault("status", {}).setdefault("phase", "Pending")


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")


def _quantities(where: str, values: Any) -> list[tuple[str, str]]:
    """Resource quantities the real server would reject (kubectl refuses to decode them)."""
    if not isinstance(values, dict):
        return []
    return [
        (
            f"{where}[{key}]",
            f"Invalid value: \"{value}\": quantities must match the regular expression '{_QUANTITY.pattern}'",
        )
        for key, value in values.items()
        if not _QUANTITY.match(str(value))
    ]


def _validate_quantities(rtype: ResourceType, obj: Obj) -> None:
    name = str((obj.get("metadata") or {}).get("name") or "")
    bad: list[tuple[str, str]] = []
    if rtype.kind == "Node":
        status = obj.get("status") or {}
        bad = _quantities("status.capacity", status.get("capacity")) + _quantities(
            "status.allocatable", status.get("allocatable")
        )
    if rtype.kind == "Pod" and rtype.group == "":
        for i, c in enumerate((obj.get("spec") or {}).get("containers") or []):
            for part in ("requests", "limits"):
                bad += _quantities(f"spec.containers[{i}].resources.{part}", (c.get("resources") or {}).get(part))
    if bad:
        raise errors.invalid(rtype.kind, name, rtype.group, bad)


def _validate(rtype: ResourceType, obj: Obj, old: Obj | None = None) -> None:
    """Admission of the object as it will be stored (``old``: the stored one, on update)."""
    karpenter_crds.admit(rtype.kind, rtype.group, obj, old)
    _validate_quantities(rtype, obj)
    name = str((obj.get("metadata") or {}).get("name") or "")
    if rtype.kind == "Pod" and rtype.group == "":
        containers = (obj.get("spec") or {}).get("containers")
        if not containers:
            raise errors.invalid("Pod", name, "", [("spec.containers", "Required value")])
        for i, c in enumerate(containers):
            if not c.get("name"):
                raise errors.invalid("Pod", name, "", [(f"spec.containers[{i}].name", "Required value")])
            if not c.get("image"):
                raise errors.invalid("Pod", name, "", [(f"spec.containers[{i}].image", "Required value")])
    if rtype.kind == "PodDisruptionBudget":
        spec = obj.get("spec") or {}
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            raise errors.invalid(
                "PodDisruptionBudget",
                name,
                "policy",
                [("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set")],
            )


def _unsupported(rtype: ResourceType) -> errors.ApiError:
    accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
    if not rtype.custom:
        accepted.insert(2, STRATEGIC_PATCH)
    return errors.ApiError(
        415,
        "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted),
        "UnsupportedMediaType",
    )


def _patcher(rtype: ResourceType, content_type: str, body: Any) -> Callable[[Obj], Any]:
    """The function applying ``body`` as a patch of ``content_type`` (415 when unsupported)."""
    if content_type == JSON_PATCH:

        def apply_json(cur: Obj) -> Any:
            result = json_patch(cur, body)
            if isinstance(result, dict) and "resourceVersion" not in result.get("metadata", {}):
                result.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
            return result

        return apply_json
    if content_type not in (MERGE_PATCH, STRATEGIC_PATCH) or (content_type == STRATEGIC_PATCH and rtype.custom):
        raise _unsupported(rtype)
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request was in an unknown format")
    if content_type == MERGE_PATCH:
        return lambda cur: merge_patch(cur, body)
    return lambda cur: strategic_merge_patch(cur, body)


class Api:
    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self.disruption = Disruption(store, registry)
        self.authorizer = Authorizer()
        self._namespaces = registry.by_kind("namespaces")
        self._priority_classes = registry.by_kind("priorityclasses")
        self._encodings = Encodings()

    # -------------------------------------------------------------- helpers

    def _decorate(self, rtype: ResourceType, obj: Obj) -> Obj:
        if rtype.kind in DECORATED:
            return self.disruption.decorate(obj)
        return obj

    def ensure_namespace(self, namespace: str) -> None:
        if self.store.find(self._namespaces, None, namespace) is None:
            self.store.create(
                self._namespaces,
                None,
                {
                    "metadata": {"name": namespace},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )

    def check_namespace(self, rtype: ResourceType, namespace: str | None) -> None:
        if rtype.namespaced and namespace and self.store.find(self._namespaces, None, namespace) is None:
            raise errors.not_found("namespaces", namespace)

    # -------------------------------------------------------------- verbs

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        return self._decorate(rtype, self.store.get(rtype, namespace, name))

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page: Page | None = None,
    ) -> tuple[builtins.list[Obj], str]:
        wanted, indexed = self._selection(rtype, label_selector, field_selector)
        items, rv = self.store.list(rtype, namespace, wanted, indexed, page=page)
        return [self._decorate(rtype, o) for o in items], rv

    def list_shared(
        self, rtype: ResourceType, namespace: str | None = None, field_selector: str | None = None
    ) -> builtins.list[Obj]:
        """`list`'s objects as stored, not copied, for the simulator's own actors that only read them
        (the outcome runs' Karpenter stand-in: docs/simulate.md#at-ten-times-the-cluster). A write never
        changes a stored object in place, it stores a new one, so what a reader holds stays as it was
        read; the reader must never write into it. A type whose reads are decorated is copied."""
        if rtype.kind in DECORATED:
            return self.list(rtype, namespace, None, field_selector)[0]
        wanted, indexed = self._selection(rtype, None, field_selector)
        return self.store.list(rtype, namespace, wanted, indexed, render=_as_stored)[0]

    def list_body(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page: Page | None = None,
    ) -> bytes | None:
        """`list_doc` of `list`, as the bytes the server sends, encoded from the stored objects
        without copying them; None for a type whose reads are decorated (PDB status)."""
        if rtype.kind in DECORATED:
            return None
        wanted, indexed = self._selection(rtype, label_selector, field_selector)
        items, rv = self.store.list(rtype, namespace, wanted, indexed, render=self._encodings, page=page)
        filtered = bool(label_selector or field_selector)
        head = json.dumps(self.list_doc(rtype, [], rv, page, filtered), separators=(",", ":"))
        return (head[: -len("[]}")] + "[" + ",".join(items) + "]}").encode()

    @staticmethod
    def _selection(
        rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> tuple[Callable[[Obj], bool], tuple[str, str] | None]:
        labels = parse_label_selector(label_selector)
        required = parse_field_selector(field_selector, rtype.field_selectors)
        fields = field_matcher(required)
        # an equality on an indexed field narrows the scan (the predicate still checks everything)
        indexed = next(((r.path, r.value) for r in required if not r.negate and r.path in rtype.indexed), None)

        def wanted(obj: Obj) -> bool:
            return matches(labels, obj["metadata"].get("labels")) and fields(obj)

        return wanted, indexed

    def list_doc(
        self, rtype: ResourceType, items: builtins.list[Obj], rv: str, page: Page | None = None, filtered: bool = False
    ) -> Obj:
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": rv, **continue_metadata(page, rv, filtered)},
            "items": items,
        }

    def create(self, rtype: ResourceType, namespace: str | None, obj: Any, *, strict: bool = True) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        if rtype.kind == "SelfSubjectAccessReview":
            return self.authorizer.review(obj)  # answered, never stored
        kind = obj.get("kind")
        if strict and kind and kind != rtype.kind:
            raise errors.bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match "
                f"the expected API version ({rtype.api_version})"
                if obj.get("apiVersion") != rtype.api_version
                else f"Object kind {kind} does not match {rtype.kind}"
            )
        if rtype.kind == "Pod" and rtype.group == "":
            _pod_defaults(obj, strict)
            classes, _ = self.store.list(self._priority_classes)
            admit_pod(obj, classes)
        _validate(rtype, obj)
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        if strict:
            self.check_namespace(rtype, ns if rtype.namespaced else None)
        elif rtype.namespaced:
            self.ensure_namespace(ns)
        return self._decorate(rtype, self.store.create(rtype, ns, obj))

    def replace(
        self, rtype: ResourceType, namespace: str | None, name: str, obj: Any, subresource: str | None = None
    ) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request was in an unknown format")

        def change(cur: Obj) -> Obj:
            _validate(rtype, obj, cur)
            return obj

        return self._decorate(rtype, self.store.mutate(rtype, namespace, name, change, subresource))

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        body: Any,
        subresource: str | None = None,
    ) -> Obj:
        apply = _patcher(rtype, content_type.split(";")[0].strip().lower(), body)

        def change(cur: Obj) -> Obj:
            try:
                result = apply(cur)
            except PatchError as exc:
                raise errors.ApiError(422, str(exc), "Invalid") from exc
            if not isinstance(result, dict):
                raise errors.ApiError(422, "the patched object is not an object", "Invalid")
            _validate(rtype, result, cur)
            return result

        return self._decorate(rtype, self.store.mutate(rtype, namespace, name, change, subresource))

    def delete(
        self, rtype: ResourceType, namespace: str | None, name: str, options: Obj | None = None
    ) -> tuple[Obj, int]:
        """Returns (body, HTTP code): pods return the object; other kinds a Status."""
        options = options or {}
        grace = options.get("gracePeriodSeconds")
        obj, gone = self.store.delete(
            rtype, namespace, name, None if grace is None else int(grace), options.get("preconditions")
        )
        if rtype.key == "pods" or not gone:
            return obj, 200
        details: Obj = {"name": name, "kind": rtype.plural, "uid": obj["metadata"]["uid"]}
        if rtype.group:
            details["group"] = rtype.group
        return errors.success(200, details), 200

    def evict(self, namespace: str, name: str, body: Obj | None) -> Obj:
        return self.disruption.evict(namespace, name, body)


def parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the body of the request was in an unknown format: {exc}") from exc


def _as_stored(obj: Obj) -> Obj:
    return obj
