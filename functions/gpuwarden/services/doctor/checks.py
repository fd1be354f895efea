"""The checks of `gpuwarden doctor`, one function each, on facts read once from the cluster.

Each check returns one Finding; none writes anything. See docs/ for what each one means.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import BadCheckpoint, checkpoint_spec
from gpuwarden.domain.errors import CloudError, KubeError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import DO_NOT_DISRUPT, NODEPOOL_LABEL, PodView, pod_from_json
from gpuwarden.services.doctor import rbac

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
    nodepools: list[dict[str, Any]] = field(default_factory=list)
    karpenter: list[KarpenterInstall] = field(default_factory=list)
    termination_handlers: list[str] = field(default_factory=list)  # "DaemonSet kube-system/aws-node-…"
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
    facts.pods = [pod_from_json(p) for p in reads.list_all_pods()]
    for node in reads.list_node_objects():
        pool = ((node.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL)
        if pool:
            facts.pool_of_node[str(node["metadata"]["name"])] = str(pool)
    facts.nodepools = _optional(facts, "NodePools", reads.list_nodepools)
    deployments = _optional(facts, "Deployments", lambda: reads.list_deployments(""))
    daemonsets = _optional(facts, "DaemonSets", lambda: reads.list_daemonsets(""))
    facts.karpenter = [karpenter_install(d, reads) for d in deployments if _is_karpenter(d)]
    for kind, items in (("DaemonSet", daemonsets), ("Deployment", deployments)):
        for obj in items:
            if _is_nth(obj):
                meta = obj.get("metadata") or {}
                facts.termination_handlers.append(f"{kind} {meta.get('namespace')}/{meta.get('name')}")
    return facts


def _unread(facts: ClusterFacts, check: str, *needs: str) -> Finding | None:
    missing = [f"{what} {facts.unread[what]}" for what in needs if what in facts.unread and what != "NodePools"]
    if not missing:
        return None
    return Finding(check, Severity.WARN, f"not checked: {', '.join(missing)}", "allow this identity to list them")


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


# ------------------------------------------------------------------------------ checks


def check_cluster_access(reads: DoctorReads, policy: Policy) -> Finding:
    """Every verb gpuwarden uses (the table its RBAC is rendered from), by SelfSubjectAccessReview."""
    denied: list[str] = []
    asked = 0
    for rule in rbac.rules(allow_exec=policy.checkpoint.allow_exec):
        resource, _, sub = rule.resource.partition("/")
        for verb in rule.verbs:
            asked += 1
            allowed, _ = reads.access_review(rule.api_group, resource, sub, verb)
            if not allowed:
                denied.append(f"{verb} {rule.resource}" + (f".{rule.api_group}" if rule.api_group else ""))
    if denied:
        return Finding(
            "cluster-access",
            Severity.ERROR,
            f"the identity in use may not: {_names(denied)} ({len(denied)} of {asked} verbs gpuwarden uses)",
            "bind gpuwarden's ClusterRole (deployed by the stack's cluster-access resource, group 'gpuwarden') "
            "to this identity, or run with the role the stack maps to that group",
        )
    return Finding("cluster-access", Severity.OK, f"all {asked} verbs gpuwarden uses are allowed")


def check_interruption_queue(facts: ClusterFacts) -> Finding:
    if unread := _unread(facts, "karpenter-interruption-queue", "Deployments"):
        return unread
    with_queue = [k for k in facts.karpenter if k.queue]
    if not facts.karpenter:
        return Finding("karpenter-interruption-queue", Severity.OK, "no Karpenter Deployment found")
    if not with_queue:
        where = _names([k.where for k in facts.karpenter])
        return Finding(
            "karpenter-interruption-queue",
            Severity.OK,
            f"Karpenter ({where}) has no interruption queue: gpuwarden alone handles interruptions",
        )
    k = with_queue[0]
    return Finding(
        "karpenter-interruption-queue",
        Severity.WARN,
        f"Karpenter {k.where} consumes interruption queue {k.queue} ({k.setting}): on Spot, scheduled-change, "
        "state-change and capacity-reservation events it deletes the NodeClaim at once and evicts every pod "
        "without karpenter.sh/do-not-disrupt. gpuwarden runs beside it: it marks each pod it asks to checkpoint "
        "karpenter.sh/do-not-disrupt=true in the same step as the cordon, launches no replacement for a node "
        "Karpenter is already deleting, and reports a node Karpenter removes mid-drain as gone early",
        'keep the queue and put karpenter.sh/do-not-disrupt: "true" in the pod template of every checkpointing '
        "workload (Karpenter can be faster than gpuwarden's own mark) and give their NodePools a "
        "terminationGracePeriod of at least 120 s + the checkpoint timeout; or unset settings.interruptionQueue "
        "(INTERRUPTION_QUEUE) so gpuwarden alone drains on interruptions",
    )


def check_termination_handler(facts: ClusterFacts) -> Finding:
    if unread := _unread(facts, "node-termination-handler", "Deployments", "DaemonSets"):
        return unread
    if not facts.termination_handlers:
        return Finding("node-termination-handler", Severity.OK, "no aws-node-termination-handler found")
    return Finding(
        "node-termination-handler",
        Severity.WARN,
        f"{_names(facts.termination_handlers)} also drains nodes on interruptions: two drainers, and "
        "aws-node-termination-handler ignores karpenter.sh/do-not-disrupt and gpuwarden's checkpoint handshake",
        "uninstall aws-node-termination-handler (Karpenter's FAQ advises against running it beside Karpenter); "
        "gpuwarden handles the same events with checkpoints, or keep it only with spot-interruption draining off",
    )


def go_duration(text: str) -> timedelta:
    """A Kubernetes duration ("48h", "1h30m", "90s", "2.5m")."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return timedelta(seconds=sum(float(n) * units[u] for n, u in parts))


def _timeout(pod: PodView, policy: Policy) -> int:
    spec = checkpoint_spec(pod, policy.checkpoint.default_timeout_seconds, policy.checkpoint.allow_exec)
    return spec.timeout_seconds if spec is not None and not isinstance(spec, BadCheckpoint) else 0


def check_termination_grace(facts: ClusterFacts, policy: Policy) -> Finding:
    short: list[str] = []
    for pool in facts.nodepools:
        name = str(pool["metadata"]["name"])
        text = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("terminationGracePeriod")
        if not text:
            continue
        longest = max(
            (_timeout(p, policy) for p in facts.pods if facts.pool_of_node.get(p.node_name or "") == name), default=0
        )
        try:
            grace = go_duration(str(text)).total_seconds()
        except ValueError:
            short.append(f"{name} ({text!r} does not parse)")
            continue
        if grace < NOTICE_SECONDS + longest:
            short.append(f"{name} ({text} < {NOTICE_SECONDS} s + {longest} s)")
    if not short:
        return Finding("nodepool-termination-grace", Severity.OK, "no NodePool terminationGracePeriod is too short")
    return Finding(
        "nodepool-termination-grace",
        Severity.WARN,
        f"NodePools whose terminationGracePeriod is shorter than the notice plus the longest checkpoint timeout "
        f"of their pods: {_names(short)}. Karpenter force-deletes do-not-disrupt pods when it runs out, "
        "before their checkpoint",
        "raise spec.template.spec.terminationGracePeriod to at least 120 s + the longest "
        "gpuwarden.io/checkpoint-timeout-seconds of the pool's pods, or leave it unset",
    )


def _annotation_problem(pod: PodView, policy: Policy) -> str | None:
    spec = checkpoint_spec(pod, policy.checkpoint.default_timeout_seconds, policy.checkpoint.allow_exec)
    if isinstance(spec, BadCheckpoint):
        return spec.reason
    named = pod.annotations.get(ann.CHECKPOINT_CONTAINER)
    if named is not None and named not in pod.containers:
        return f"checkpoint container {named!r} is not a container of this pod"
    return None


def check_checkpoint_annotations(facts: ClusterFacts, policy: Policy) -> Finding:
    opted = [p for p in facts.pods if ann.CHECKPOINT in p.annotations]
    bad = [f"{p.key}: {why}" for p in opted if (why := _annotation_problem(p, policy))]
    if bad:
        return Finding(
            "checkpoint-annotations",
            Severity.ERROR,
            f"{len(bad)} opted-in pod(s) would be evicted without a checkpoint: {_names(bad)}",
            "fix the gpuwarden.io/checkpoint* annotations in the pod templates (see docs/ for the forms)",
        )
    unguarded = [p.key for p in opted if p.annotations.get(DO_NOT_DISRUPT) != "true"]
    if facts.queue_on and unguarded:
        return Finding(
            "checkpoint-annotations",
            Severity.WARN,
            f"Karpenter's interruption queue is on and {len(unguarded)} opted-in pod(s) lack "
            f"karpenter.sh/do-not-disrupt: {_names(unguarded)}; Karpenter may evict them before gpuwarden marks them",
            'add karpenter.sh/do-not-disrupt: "true" to the pod template of each checkpointing workload',
        )
    return Finding("checkpoint-annotations", Severity.OK, f"{len(opted)} opted-in pod(s), all annotations valid")


def check_static_gpu_limit(facts: ClusterFacts, policy: Policy) -> Finding:
    static = [str(p["metadata"]["name"]) for p in facts.nodepools if (p.get("spec") or {}).get("replicas") is not None]
    clashes = [
        f"window {w.name} -> {pool}"
        for w in policy.windows
        if w.gpu_limit is not None
        for pool in static
        if w.applies_to(pool)
    ]
    if not clashes:
        return Finding("static-nodepool-gpu-limit", Severity.OK, "no window's gpu_limit covers a static NodePool")
    return Finding(
        "static-nodepool-gpu-limit",
        Severity.WARN,
        f"gpu_limit cannot apply to a static NodePool (spec.replicas; Karpenter accepts only limits.nodes there), "
        f"it is skipped: {_names(clashes)}",
        "list only dynamic NodePools in those windows' nodepools, or size a static pool with spec.replicas",
    )


def check_gpu_metrics(policy: Policy, has_metric: Callable[[str], bool]) -> Finding:
    if not policy.gpu_idle.enabled:
        return Finding("gpu-metrics", Severity.OK, "gpu_idle.enabled is false: GPU-idle reclaim needs no metric")
    try:
        found = has_metric(policy.cluster)
    except CloudError as err:
        return Finding("gpu-metrics", Severity.WARN, f"could not list CloudWatch metrics: {err}", "check AWS access")
    if found:
        return Finding("gpu-metrics", Severity.OK, f"node_gpu_utilization is reported for cluster {policy.cluster}")
    return Finding(
        "gpu-metrics",
        Severity.WARN,
        f"no node_gpu_utilization for cluster {policy.cluster} in CloudWatch: GPU-idle reclaim never sees an idle node",
        "install the Amazon CloudWatch Observability EKS add-on (Container Insights with the NVIDIA GPU metrics)",
    )


def check_policy(policy: Policy | None, error: str | None, now: datetime, source: str | None = "the policy") -> Finding:
    """``source`` None: no policy was given, the defaults are in use (a warning, never a silent ok)."""
    if policy is None:
        return Finding("policy", Severity.ERROR, f"the policy does not validate: {error}", "fix the policy document")
    if source is None:
        return Finding(
            "policy",
            Severity.WARN,
            f"no policy given: the defaults are in use (cluster {policy.cluster}, no budget windows)",
            "set GPUWARDEN_POLICY_FILE (locally) or GPUWARDEN_POLICY_PARAMETER (deployed); docs/policy.md",
        )
    lines = []
    for window in policy.windows:
        current = window.occurrence_at(now)
        opens = window.next_fire(now).astimezone(window.zone)
        closes = (opens + window.duration).astimezone(window.zone)
        if current is not None:
            lines.append(
                f"{window.name} is open until {current.local_closes_at.isoformat()}, "
                f"next opens {opens.isoformat()} ({window.timezone})"
            )
            continue
        lines.append(f"{window.name} opens {opens.isoformat()}, closes {closes.isoformat()} ({window.timezone})")
    windows = "; ".join(lines) if lines else "no budget windows"
    return Finding("policy", Severity.OK, f"valid for cluster {policy.cluster}: {windows}")
