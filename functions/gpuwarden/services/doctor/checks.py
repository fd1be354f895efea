"""The checks of `gpuwarden doctor`, one function each, on facts read once from the cluster.

Each check returns one Finding; none writes anything. See docs/ for what each one means.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import BadCheckpoint, checkpoint_spec
from gpuwarden.domain.errors import CloudError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.switches import is_on
from gpuwarden.domain.views import DO_NOT_DISRUPT, PodView
from gpuwarden.domain.wording import count
from gpuwarden.services.doctor import rbac
from gpuwarden.services.doctor.facts import (
    NOTICE_SECONDS,
    ClusterFacts,
    DoctorReads,
    Finding,
    Severity,
    names,
    not_read,
)

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
            f"the identity in use may not: {names(denied)} ({len(denied)} of {asked} verbs gpuwarden uses)",
            "bind gpuwarden's ClusterRole (deployed by the stack's cluster-access resource, group 'gpuwarden') "
            "to this identity, or run with the role the stack maps to that group",
        )
    return Finding("cluster-access", Severity.OK, f"all {asked} verbs gpuwarden uses are allowed")


def _karpenter_elsewhere(facts: ClusterFacts) -> Finding:
    """No Karpenter Deployment: whether Karpenter runs all the same (a process outside the cluster,
    as on the real plane, or a managed one), seen by the status its NodePool controller writes."""
    written = [
        str((pool.get("metadata") or {}).get("name"))
        for pool in facts.nodepools
        if any(c.get("type") == "Ready" for c in (pool.get("status") or {}).get("conditions") or ())
    ]
    if not written:
        return Finding(
            "karpenter-interruption-queue",
            Severity.OK,
            "no Karpenter found: no Karpenter Deployment, and no NodePool with the Ready condition Karpenter writes",
        )
    return Finding(
        "karpenter-interruption-queue",
        Severity.WARN,
        f"Karpenter runs (NodePool {names(written)} carries the Ready condition its controller writes) but not as a "
        "Deployment in this cluster, so whether it consumes an interruption queue cannot be read here",
        "if it does (settings.interruptionQueue / INTERRUPTION_QUEUE), put karpenter.sh/do-not-disrupt on every "
        "checkpointing pod, as when its Deployment is found (docs/cluster.md#beside-karpenter)",
    )


def check_interruption_queue(facts: ClusterFacts) -> Finding:
    if unread := not_read(facts, "karpenter-interruption-queue", "Deployments"):
        return unread
    with_queue = [k for k in facts.karpenter if k.queue]
    if not facts.karpenter:
        return _karpenter_elsewhere(facts)
    if not with_queue:
        where = names([k.where for k in facts.karpenter])
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
    if unread := not_read(facts, "node-termination-handler", "Deployments", "DaemonSets"):
        return unread
    if not facts.termination_handlers:
        return Finding("node-termination-handler", Severity.OK, "no aws-node-termination-handler found")
    return Finding(
        "node-termination-handler",
        Severity.WARN,
        f"{names(facts.termination_handlers)} also drains nodes on interruptions: two drainers, and "
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
    return _warn_unless_empty(
        "nodepool-termination-grace",
        short,
        "no NodePool terminationGracePeriod is too short",
        f"NodePools whose terminationGracePeriod is shorter than the notice plus the longest checkpoint timeout "
        f"of their pods: {names(short)}. Karpenter force-deletes do-not-disrupt pods when it runs out, "
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
            f"{count(len(bad), 'opted-in pod')} would be evicted without a checkpoint: {names(bad)}",
            "fix the gpuwarden.io/checkpoint* annotations in the pod templates (see docs/ for the forms)",
        )
    unguarded = [p.key for p in opted if p.annotations.get(DO_NOT_DISRUPT) != "true"]
    if facts.queue_on and unguarded:
        return Finding(
            "checkpoint-annotations",
            Severity.WARN,
            f"Karpenter's interruption queue is on and {count(len(unguarded), 'opted-in pod')} "
            f"{'lacks' if len(unguarded) == 1 else 'lack'} "
            f"karpenter.sh/do-not-disrupt: {names(unguarded)}; Karpenter may evict them before gpuwarden marks them",
            'add karpenter.sh/do-not-disrupt: "true" to the pod template of each checkpointing workload',
        )
    return Finding("checkpoint-annotations", Severity.OK, f"{count(len(opted), 'opted-in pod')}, all annotations valid")


def check_static_gpu_limit(facts: ClusterFacts, policy: Policy) -> Finding:
    static = [str(p["metadata"]["name"]) for p in facts.nodepools if (p.get("spec") or {}).get("replicas") is not None]
    clashes = [
        f"window {w.name} -> {pool}"
        for w in policy.windows
        if w.gpu_limit is not None
        for pool in static
        if w.applies_to(pool)
    ]
    return _warn_unless_empty(
        "static-nodepool-gpu-limit",
        clashes,
        "no window's gpu_limit covers a static NodePool",
        f"gpu_limit cannot apply to a static NodePool (spec.replicas; Karpenter accepts only limits.nodes there), "
        f"it is skipped: {names(clashes)}",
        "list only dynamic NodePools in those windows' nodepools, or size a static pool with spec.replicas",
    )


#: gpu-idle's switch (its spec's `switch`, gpuwarden/kinds/gpu_idle/): the kind's section is its room's,
#: which this floor does not import, so the check reads the switch by name as doctor's behaviours do.
GPU_IDLE_SWITCH = "gpu_idle.enabled"


def check_gpu_metrics(policy: Policy, has_metric: Callable[[str], bool]) -> Finding:
    if not is_on(policy, GPU_IDLE_SWITCH):  # the switch, read by its name (domain/switches.py)
        return Finding("gpu-metrics", Severity.OK, f"{GPU_IDLE_SWITCH} is false: GPU-idle reclaim needs no metric")
    alerted = sorted(name for name, kind in policy.alerts.items() if kind == "gpu-idle")
    if alerted:  # an alert is its own evidence (docs/gpu-signals.md): no CloudWatch metric is read for it
        return Finding(
            "gpu-metrics",
            Severity.OK,
            f"gpu-idle is fed by the Alertmanager {'alert' if len(alerted) == 1 else 'alerts'} {names(alerted)} "
            "(policy alerts): "
            "no CloudWatch GPU metric is needed",
        )
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
        # the error names the file and says what is wrong with it: not found, or each key that does not validate
        fix = "point GPUWARDEN_POLICY_FILE (or GPUWARDEN_POLICY_PARAMETER) at a policy that validates (docs/policy.md)"
        return Finding("policy", Severity.ERROR, str(error), fix)
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


def _warn_unless_empty(check: str, found: list[str], ok: str, warning: str, fix: str) -> Finding:
    """OK when a check found nothing; else the warning (which names what it found) and its fix."""
    return Finding(check, Severity.WARN, warning, fix) if found else Finding(check, Severity.OK, ok)
