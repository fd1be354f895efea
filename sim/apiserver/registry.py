"""The table of resource types the simulator serves, and their discovery documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_LIST = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    categories: tuple[str, ...] = ()
    custom: bool = False  # custom resources: no strategic merge patch
    field_selectors: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    #: fields the store keeps an index on, as kube-apiserver's watch cache does (pods by
    #: ``spec.nodeName``: every kubelet lists its own pods that way)
    indexed: tuple[str, ...] = ()
    subresources: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (name, kind, verbs)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key: "plural.group" (core: plural)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def qualified(self) -> str:
        """How error messages name the resource: "pods", "nodepools.karpenter.sh"."""
        return self.key


_POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
_NEW_EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "reportingController",
    "type",
)
_STATUS_SUB = ("get", "patch", "update")

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        ("ns",),
        ("create", "delete", "get", "list", "patch", "update", "watch"),
        field_selectors=("metadata.name", "status.phase"),
        subresources=(("status", "Namespace", _STATUS_SUB),),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        ("no",),
        field_selectors=("metadata.name", "spec.unschedulable"),
        subresources=(("status", "Node", _STATUS_SUB),),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("po",),
        categories=("all",),
        field_selectors=_POD_FIELDS,
        indexed=("spec.nodeName",),
        subresources=(
            ("eviction", "Eviction", ("create",)),
            ("exec", "PodExecOptions", ("create", "get")),
            ("status", "Pod", _STATUS_SUB),
        ),
    ),
    ResourceType("", "v1", "events", "Event", True, ("ev",), field_selectors=_EVENT_FIELDS),
    ResourceType("", "v1", "services", "Service", True, ("svc",), categories=("all",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        True,
        ("pvc",),
        subresources=(("status", "PersistentVolumeClaim", _STATUS_SUB),),
    ),
    ResourceType(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        False,
        ("pv",),
        subresources=(("status", "PersistentVolume", _STATUS_SUB),),
    ),
    ResourceType(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        ("ds",),
        categories=("all",),
        subresources=(("status", "DaemonSet", _STATUS_SUB),),
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        categories=("all",),
        subresources=(("status", "Deployment", _STATUS_SUB),),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        categories=("all",),
        subresources=(("status", "ReplicaSet", _STATUS_SUB),),
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        categories=("all",),
        subresources=(("status", "StatefulSet", _STATUS_SUB),),
    ),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        (),
        categories=("all",),
        subresources=(("status", "Job", _STATUS_SUB),),
    ),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        subresources=(("status", "PodDisruptionBudget", _STATUS_SUB),),
    ),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, ("ev",), field_selectors=_NEW_EVENT_FIELDS),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        True,
        (),
        subresources=(("status", "ResourceClaim", _STATUS_SUB),),
    ),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",)),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, verbs=("create",)
    ),
    ResourceType(
        "karpenter.sh",
        "v1",
        "nodepools",
        "NodePool",
        False,
        (),
        custom=True,
        categories=("karpenter",),
        subresources=(("status", "NodePool", _STATUS_SUB),),
    ),
    ResourceType(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        "NodeClaim",
        False,
        (),
        custom=True,
        categories=("karpenter",),
        subresources=(("status", "NodeClaim", _STATUS_SUB),),
    ),
)

# Eviction lives in the core group's discovery as a subresource of pods, but its kind is policy/v1.
_SUBRESOURCE_GROUP = {("pods", "eviction"): ("policy", "v1")}


@dataclass
class Registry:
    types: tuple[ResourceType, ...] = RESOURCES
    _by_path: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for t in self.types:
            self._by_path[(t.group, t.version, t.plural)] = t

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, kind: str, api_version: str | None = None) -> ResourceType:
        """Find a type by kind ("Pod"), plural ("pods"), short name or "plural.group"."""
        for t in self.types:
            if api_version is not None and t.api_version != api_version:
                continue
            if kind in (t.kind, t.plural, t.key, *t.short_names) or kind.lower() == t.singular:
                return t
        raise KeyError(f"unknown resource kind {kind!r}")

    def groups(self) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        for t in self.types:
            if t.group and (t.group, t.version) not in seen:
                seen.append((t.group, t.version))
        return seen

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        members = [t for t in self.types if t.group == group and t.version == version]
        if not members:
            return None
        resources: list[dict[str, Any]] = []
        for t in members:
            entry: dict[str, Any] = {
                "name": t.plural,
                "singularName": t.singular,
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": list(t.verbs),
            }
            if t.short_names:
                entry["shortNames"] = list(t.short_names)
            if t.categories:
                entry["categories"] = list(t.categories)
            resources.append(entry)
            for sub, kind, verbs in t.subresources:
                sub_entry: dict[str, Any] = {
                    "name": f"{t.plural}/{sub}",
                    "singularName": "",
                    "namespaced": t.namespaced,
                    "kind": kind,
                    "verbs": list(verbs),
                }
                if (t.plural, sub) in _SUBRESOURCE_GROUP:
                    sub_entry["group"], sub_entry["version"] = _SUBRESOURCE_GROUP[(t.plural, sub)]
                resources.append(sub_entry)
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    def group_doc(self, group: str, version: str) -> dict[str, Any]:
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": [gv],
            "preferredVersion": gv,
        }

    def group_list(self) -> dict[str, Any]:
        groups = []
        for group, version in self.groups():
            doc = self.group_doc(group, version)
            del doc["kind"], doc["apiVersion"]
            groups.append(doc)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
