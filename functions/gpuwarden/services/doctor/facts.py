"""What `gpuwarden doctor` reads once from the cluster (its facts), and what each check answers
(a Finding). Reading never writes anything."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from gpuwarden.domain.errors import KubeError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import NODEPOOL_LABEL, NodeView, PodView, node_from_json, pod_from_json
from gpuwarden.services.doctor.gpu_health import node_repair_on

#: The notice EC2 gives before a Spot/capacity-reservation instance goes: what a drain must fit in.
NOTICE_SECONDS = 120
#: Karpenter's interruption-queue settings, newest first: the env var (v0.32+), the flag, the
#: names older charts and e2e setups used, and the v0.19-v0.31 global-settings ConfigMap key.
QUEUE_ENV = ("INTERRUPTION_QUEUE", "INTERRUPTION_QUEUE_NAME", "AWS_INTERRUPTION_QUEUE_NAME")
QUEUE_FLAG = "--interruption-queue"
LEGACY_SETTINGS = ("karpenter-global-settings", "aws.interruptionQueueName")
NTH = "aws-node-termination-handler"
_SHOWN = 5  # pods/pools named in one message


class Severity(StrEnum):
    OK = "ok"
    WARN = "warn"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    check: str
    severity: Severity
    message: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "severity": self.severity.value, "message": self.message, "fix": self.fix}


class DoctorReads(Protocol):
    """What the doctor reads (adapters/cluster_reads.py): reads and access reviews only."""

    @property
    def server(self) -> str: ...

    def access_review(self, group: str, resource: str, subresource: str, verb: str) -> tuple[bool, str]: ...
    def list_deployments(self, label_selector: str) -> list[dict[str, Any]]: ...
    def list_daemonsets(self, label_selector: str) -> list[dict[str, Any]]: ...
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def list_all_pods(self) -> list[dict[str, Any]]: ...
    def list_node_objects(self) -> list[dict[str, Any]]: ...
    def list_nodepools(self) -> list[dict[str, Any]]: ...
    def list_nodeclaims(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class KarpenterInstall:
    where: str  # "kube-system/karpenter"
    queue: str | None  # the interruption queue, None when it has none
    setting: str = ""  # where the queue was found


@dataclass
class ClusterFacts:
    """Everything the checks look at, read once."""

    pods: list[PodView] = field(default_factory=list)
    pool_of_node: dict[str, str] = field(default_factory=dict)
    zone_of_node: dict[str, str | None] = field(default_factory=dict)
    #: pod key → container → its command line (``command`` + ``args``; ``args`` alone when the image's
    #: entrypoint runs them): for `checkpoint-gangs` (services/doctor/gangs.py)
    commands: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    nodepools: list[dict[str, Any]] = field(default_factory=list)
    nodeclaims: list[dict[str, Any]] = field(default_factory=list)
    karpenter: list[KarpenterInstall] = field(default_factory=list)
    #: Karpenter's Deployments as read, for their version (services/doctor/versions.py)
    karpenter_deployments: list[dict[str, Any]] = field(default_factory=list)
    termination_handlers: list[str] = field(default_factory=list)  # "DaemonSet kube-system/aws-node-…"
    daemonsets: list[dict[str, Any]] = field(default_factory=list)  # as read (dcgm-exporter: doctor/adopted.py)
    nodes: list[NodeView] = field(default_factory=list)
    node_repair: list[str] = field(default_factory=list)  # Karpenter installs with NodeRepair on
    #: what could not be read (a missing CRD, a 403), by what: the checks that need it say so
    unread: dict[str, str] = field(default_factory=dict)

    @property
    def queue_on(self) -> bool:
        return any(k.queue for k in self.karpenter)


def _is_karpenter(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    images = [str(c.get("image", "")) for c in _containers(obj)]
    return (
        labels.get("app.kubernetes.io/name") == "karpenter"
        or meta.get("name") == "karpenter"
        or any("/karpenter/controller" in image for image in images)
    )


def _is_nth(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        NTH in (labels.get("app.kubernetes.io/name"), labels.get("k8s-app"), labels.get("app"))
        or NTH in str(meta.get("name", ""))
        or any(NTH in str(c.get("image", "")) for c in _containers(obj))
    )


def _containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return list(spec.get("containers") or [])


def _queue_in_container(container: Mapping[str, Any]) -> tuple[str, str] | None:
    for env in container.get("env") or []:
        if env.get("name") in QUEUE_ENV and (env.get("value") or env.get("valueFrom")):
            return str(env.get("value") or "(from valueFrom)"), f"env {env['name']}"
    args = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    for i, arg in enumerate(args):
        if arg.startswith(QUEUE_FLAG + "=") and arg.split("=", 1)[1]:
            return arg.split("=", 1)[1], f"flag {QUEUE_FLAG}"
        if arg == QUEUE_FLAG and i + 1 < len(args) and args[i + 1]:
            return args[i + 1], f"flag {QUEUE_FLAG}"
    return None


def karpenter_install(deployment: Mapping[str, Any], reads: DoctorReads) -> KarpenterInstall:
    meta = deployment.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    where = f"{namespace}/{meta.get('name')}"
    for container in _containers(deployment):
        found = _queue_in_container(container)
        if found:
            return KarpenterInstall(where, found[0], found[1])
    try:
        legacy = reads.get_configmap(namespace, LEGACY_SETTINGS[0])
    except KubeError as err:
        if err.status != 403:
            raise
        legacy = None  # the env var and the flag are the settings of every Karpenter since v0.32
    queue = ((legacy or {}).get("data") or {}).get(LEGACY_SETTINGS[1])
    if queue:
        return KarpenterInstall(where, str(queue), f"ConfigMap {LEGACY_SETTINGS[0]} {LEGACY_SETTINGS[1]}")
    return KarpenterInstall(where, None)


def _optional(facts: ClusterFacts, what: str, read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A read a cluster may refuse (no Karpenter CRDs: 404; no list permission: 403): remembered, not fatal."""
    try:
        return read()
    except KubeError as err:
        if err.status not in (403, 404):
            raise
        facts.unread[what] = "not installed (404)" if err.status == 404 else "forbidden (403)"
        return []


def read_facts(reads: DoctorReads) -> ClusterFacts:
    facts = ClusterFacts()
    raw = reads.list_all_pods()
    facts.pods = [pod_from_json(p) for p in raw]
    for pod, obj in zip(facts.pods, raw, strict=True):
        containers = (obj.get("spec") or {}).get("containers") or ()
        facts.commands[pod.key] = {
            str(c.get("name")): (*(c.get("command") or ()), *(c.get("args") or ())) for c in containers
        }
    for node in reads.list_node_objects():
        view = node_from_json(node)
        facts.nodes.append(view)
        facts.zone_of_node[view.name] = view.zone
        pool = ((node.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL)
        if pool:
            facts.pool_of_node[str(node["metadata"]["name"])] = str(pool)
    facts.nodepools = _optional(facts, "NodePools", reads.list_nodepools)
    facts.nodeclaims = _optional(facts, "NodeClaims", reads.list_nodeclaims)
    deployments = _optional(facts, "Deployments", lambda: reads.list_deployments(""))
    daemonsets = _optional(facts, "DaemonSets", lambda: reads.list_daemonsets(""))
    facts.daemonsets = daemonsets
    karpenters = [d for d in deployments if _is_karpenter(d)]
    facts.karpenter = [karpenter_install(d, reads) for d in karpenters]
    facts.karpenter_deployments = karpenters
    facts.node_repair = [k.where for d, k in zip(karpenters, facts.karpenter, strict=True) if node_repair_on(d)]
    for kind, items in (("DaemonSet", daemonsets), ("Deployment", deployments)):
        for obj in items:
            if _is_nth(obj):
                meta = obj.get("metadata") or {}
                facts.termination_handlers.append(f"{kind} {meta.get('namespace')}/{meta.get('name')}")
    return facts


def not_read(facts: ClusterFacts, check: str, *needs: str) -> Finding | None:
    missing = [f"{what} {facts.unread[what]}" for what in needs if what in facts.unread and what != "NodePools"]
    if not missing:
        return None
    return Finding(check, Severity.WARN, f"not checked: {', '.join(missing)}", "allow this identity to list them")


def names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


@dataclass(frozen=True)
class KindCheck:
    """A kind's own doctor check, in the kind's room (`KindSpec.doctor`): its finding from the cluster's
    facts, the policy and the time, reported at its name's place in `doctor.CLUSTER_CHECKS`."""

    name: str
    run: Callable[[ClusterFacts, Policy, datetime], Finding]
