"""Small frozen views of Kubernetes objects: what the decisions need, nothing more.

Adapters build them from the API's JSON; the domain never sees a client type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.resources import extended, extended_of, pod_requests, quantities, resource_claims, volume_claims

GPU_RESOURCE = "nvidia.com/gpu"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
#: Karpenter (AWS provider) labels nodes launched into a Capacity Reservation / Capacity Block.
CAPACITY_RESERVATION_LABEL = "karpenter.k8s.aws/capacity-reservation-id"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: Karpenter's taint on a node it has begun to disrupt (and so to replace) itself.
KARPENTER_DISRUPTED_TAINT = "karpenter.sh/disrupted"

_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z0-9-]+)/(?P<instance>i-[0-9a-f]+)$")


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class NodeCondition:
    """One entry of a node's ``status.conditions`` (docs/gpu-signals.md reads the GPU-health ones)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str | None = None
    effect: str = ""


@dataclass(frozen=True)
class NodeSelectorRequirement:
    """One `matchExpressions` entry of a required node-affinity term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeView:
    name: str
    resource_version: str
    provider_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    gpu_capacity: int = 0
    addresses: tuple[str, ...] = ()
    #: The NodeClaim that owns the node: Karpenter adds that owner reference when it registers it.
    nodeclaim: str | None = None
    #: ``status.conditions`` by type.
    conditions: Mapping[str, NodeCondition] = field(default_factory=dict)
    #: Extended resources (``vendor/name``: accelerators, EFA) of ``status.allocatable`` and
    #: ``status.capacity`` that are whole numbers (docs/gpu-signals.md, "Accelerators").
    allocatable: Mapping[str, int] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)
    #: ``metadata.deletionTimestamp`` is set.
    deleting: bool = False
    #: Every entry of ``status.capacity`` (cpu, memory, pods, extended resources), exactly: what
    #: leaves its NodePool's ``status.resources`` when the node goes (docs/cluster.md, "Limits and tiers").
    capacity_quantities: Mapping[str, Fraction] = field(default_factory=dict)

    @property
    def instance_id(self) -> str | None:
        match = _PROVIDER_ID.match(self.provider_id or "")
        return match["instance"] if match else None

    @property
    def zone(self) -> str | None:
        match = _PROVIDER_ID.match(self.provider_id or "")
        return match["zone"] if match else self.labels.get(ZONE_LABEL)

    @property
    def nodepool(self) -> str | None:
        return self.labels.get(NODEPOOL_LABEL)

    @property
    def instance_type(self) -> str | None:
        return self.labels.get(INSTANCE_TYPE_LABEL)

    @property
    def karpenter_disrupted(self) -> bool:
        """Karpenter has begun to disrupt the node: it replaces the capacity itself."""
        return any(t.key == KARPENTER_DISRUPTED_TAINT for t in self.taints)

    @property
    def capacity_reservation_id(self) -> str | None:
        """The Capacity Reservation (or Capacity Block) Karpenter launched the node into."""
        return self.labels.get(CAPACITY_RESERVATION_LABEL)

    @property
    def capacity_type(self) -> str | None:
        return self.labels.get(CAPACITY_TYPE_LABEL)

    @property
    def do_not_disrupt(self) -> bool:
        return self.annotations.get(DO_NOT_DISRUPT) == "true"


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    node_name: str | None
    phase: str
    resource_version: str = ""
    owner_kind: str | None = None
    owner_name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[str, ...] = ()
    grace_seconds: int = 30
    deletion_timestamp: datetime | None = None
    #: ``metadata.creationTimestamp`` (whole seconds)
    created: datetime | None = None
    pod_ip: str | None = None
    gpu_request: int = 0
    #: `spec.priority` (set by admission from the PriorityClass); 0 when absent, as the scheduler reads it.
    priority: int = 0
    #: where the pod may run (`domain.placement` for a replacement, `domain.reschedule` for GPU-idle):
    #: tolerations, nodeSelector, and the terms of
    #: `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (any one must match)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    #: Extended resources (``vendor/name``) the pod requests, as the scheduler counts them: the larger
    #: of its containers' sum (with restartable init containers) and its largest init container.
    requests: Mapping[str, int] = field(default_factory=dict)
    #: Every resource the pod requests (cpu, memory, extended resources, ...), exactly, as
    #: kube-scheduler counts them (`resources.pod_requests`): what a replacement is sized with.
    all_requests: Mapping[str, Fraction] = field(default_factory=dict)
    #: The ResourceClaims (DRA) the pod uses: ``status.resourceClaimStatuses`` names, else
    #: ``spec.resourceClaims[].resourceClaimName``.
    resource_claims: tuple[str, ...] = ()
    #: The PersistentVolumeClaims its volumes name (a generic ephemeral volume's is ``<pod>-<volume>``).
    volume_claims: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_mirror(self) -> bool:
        return MIRROR_ANNOTATION in self.annotations

    @property
    def is_daemonset(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def terminating(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def started(self) -> bool:
        """Its containers run (phase Running): a pod not started yet (Pending) has nothing to save and
        nothing running to keep a node in use."""
        return self.phase == "Running"

    @property
    def ignores_pdbs(self) -> bool:
        """The Eviction API deletes this pod without consulting any PodDisruptionBudget, and takes no
        disruption from them: kube-apiserver `canIgnorePDB` (pkg/registry/core/pod/storage/eviction.go),
        a pod that is Pending, Succeeded or Failed, or already terminating."""
        return self.phase in ("Pending", "Succeeded", "Failed") or self.terminating

    @property
    def do_not_disrupt(self) -> bool:
        """The owner asked Karpenter (and gpuwarden's voluntary kinds) to leave this pod alone. A mark
        gpuwarden added itself to shield a checkpoint from Karpenter's drain is not the owner's."""
        return self.annotations.get(DO_NOT_DISRUPT) == "true" and ann.DO_NOT_DISRUPT_ADDED not in self.annotations


def _int_quantity(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _conditions(raw: object) -> dict[str, NodeCondition]:
    found: dict[str, NodeCondition] = {}
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
            continue
        when = item.get("lastTransitionTime")
        try:
            at = isoparse(when) if isinstance(when, str) and when else None
        except ValueError:
            at = None
        found[item["type"]] = NodeCondition(
            type=item["type"],
            status=str(item.get("status", "")),
            reason=str(item.get("reason") or ""),
            message=str(item.get("message") or "")[:1024],
            last_transition=at,
        )
    return found


def node_from_json(obj: Mapping[str, Any]) -> NodeView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    taints = tuple(Taint(key=t["key"], effect=t["effect"], value=t.get("value")) for t in spec.get("taints") or ())
    capacity = status.get("capacity") or {}
    return NodeView(
        name=meta["name"],
        resource_version=str(meta.get("resourceVersion", "")),
        provider_id=spec.get("providerID"),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        gpu_capacity=_int_quantity(capacity.get(GPU_RESOURCE, 0)),
        addresses=tuple(a.get("address", "") for a in status.get("addresses") or ()),
        conditions=_conditions(status.get("conditions")),
        allocatable=extended(status.get("allocatable")),
        capacity=extended(capacity),
        deleting=bool(meta.get("deletionTimestamp")),
        capacity_quantities=quantities(capacity),
        nodeclaim=next(
            (
                str(o.get("name"))
                for o in meta.get("ownerReferences") or ()
                if o.get("kind") == "NodeClaim" and str(o.get("apiVersion", "")).startswith("karpenter.sh/")
            ),
            None,
        ),
    )


def _gpu_request(spec: Mapping[str, Any]) -> int:
    total = 0
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        total += _int_quantity(limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE, 0)))
    return total


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=t.get("value"),
            effect=str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or ()
    )


def _required_terms(spec: Mapping[str, Any]) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return tuple(
        tuple(
            NodeSelectorRequirement(str(e.get("key", "")), str(e.get("operator", "")), tuple(e.get("values") or ()))
            for e in term.get("matchExpressions") or ()
        )
        for term in affinity.get("nodeSelectorTerms") or ()
    )


def pod_from_json(obj: Mapping[str, Any]) -> PodView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    owner = next(
        (o for o in meta.get("ownerReferences") or () if o.get("controller")),
        None,
    )
    deletion = meta.get("deletionTimestamp")
    created = meta.get("creationTimestamp")
    grace = spec.get("terminationGracePeriodSeconds")
    asked = pod_requests(spec)
    return PodView(
        namespace=meta.get("namespace", "default"),
        name=meta["name"],
        uid=str(meta.get("uid", "")),
        node_name=spec.get("nodeName"),
        phase=status.get("phase", "Unknown"),
        resource_version=str(meta.get("resourceVersion", "")),
        owner_kind=owner.get("kind") if owner else None,
        owner_name=owner.get("name") if owner else None,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        containers=tuple(c.get("name", "") for c in spec.get("containers") or ()),
        grace_seconds=30 if grace is None else int(grace),
        deletion_timestamp=isoparse(deletion) if deletion else None,
        created=isoparse(created) if created else None,
        pod_ip=status.get("podIP"),
        gpu_request=_gpu_request(spec),
        priority=int(spec.get("priority") or 0),
        tolerations=_tolerations(spec),
        node_selector=dict(spec.get("nodeSelector") or {}),
        required_node_affinity=_required_terms(spec),
        requests=extended_of(asked),
        all_requests=asked,
        resource_claims=resource_claims(spec, status),
        volume_claims=volume_claims(str(meta["name"]), spec),
    )
