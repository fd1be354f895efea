"""`gpuwarden doctor`: the cluster, the policy and the AWS account against what gpuwarden needs
and against what would fight it. One finding per check; it reads, it never writes.

A failure to reach the cluster or AWS is a finding, never an exception: the report is always
complete, in the contract's order, and the exit code says whether anything is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuwarden.domain.alerts_received import ReceivedAlert
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.switches import behaviours
from gpuwarden.services.doctor.adopted import check_alert_node_labels, check_eks_auto_mode
from gpuwarden.services.doctor.checks import (
    check_checkpoint_annotations,
    check_cluster_access,
    check_gpu_metrics,
    check_interruption_queue,
    check_policy,
    check_static_gpu_limit,
    check_termination_grace,
    check_termination_handler,
)
from gpuwarden.services.doctor.coverage import check_checkpoint_coverage
from gpuwarden.services.doctor.facts import ClusterFacts, DoctorReads, Finding, KindCheck, Severity, read_facts
from gpuwarden.services.doctor.gangs import check_checkpoint_gangs
from gpuwarden.services.doctor.versions import check_karpenter_version


def check_behaviours(policy: Policy, switches: Sequence[str]) -> Finding:
    """What is on and what is off, by switch name (docs/policy.md#switches): the kinds' ``switches``."""
    states = behaviours(policy, switches)
    on = ", ".join(name for name, value in states.items() if value) or "none"
    off = ", ".join(name for name, value in states.items() if not value) or "none"
    return Finding("behaviours", Severity.OK, f"on: {on}; off: {off}")


def _no_behaviours() -> Finding:
    """A policy that does not validate runs nothing: every handler refuses it (docs/policy.md)."""
    return Finding(
        "behaviours",
        Severity.WARN,
        "none: the policy does not validate, so every handler refuses to run (fail closed)",
        "fix the policy (the `policy` finding names the key)",
    )


__all__ = ["CLUSTER_CHECKS", "DoctorReads", "DoctorReport", "Finding", "Severity", "diagnose"]

#: The checks that need the cluster, in the order they are reported (the contract's). A kind's own
#: check (`gpu-health`, `karpenter-expiry`) lives in the kind's room and is handed to `diagnose`.
CLUSTER_CHECKS = (
    "cluster-access",
    "karpenter-interruption-queue",
    "node-termination-handler",
    "nodepool-termination-grace",
    "checkpoint-annotations",
    "checkpoint-gangs",
    "checkpoint-coverage",
    "static-nodepool-gpu-limit",
    "gpu-health",
    "karpenter-expiry",
    "alert-node-labels",
    "eks-auto-mode",
    "karpenter-version",
)


@dataclass(frozen=True)
class DoctorReport:
    findings: list[Finding]

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.WARN)

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_json() for f in self.findings], "errors": self.errors, "warnings": self.warnings}


def _unreachable(why: str) -> list[Finding]:
    first = Finding(
        "cluster-access",
        Severity.ERROR,
        f"cannot read the cluster: {why}",
        "check KUBECONFIG (or the policy's cluster, region and AWS credentials for EKS) and the network path",
    )
    rest = [
        Finding(name, Severity.WARN, "not checked: the cluster could not be read", "fix cluster-access first")
        for name in CLUSTER_CHECKS[1:]
    ]
    return [first, *rest]


def _cluster_findings(
    reads: DoctorReads,
    policy: Policy,
    now: datetime,
    received: Sequence[ReceivedAlert] | str | None,
    kind_checks: Sequence[KindCheck],
) -> list[Finding]:
    try:
        facts: ClusterFacts = read_facts(reads)
        access = check_cluster_access(reads, policy)
    except GpuwardenError as err:
        return _unreachable(f"{reads.server}: {err}")
    findings = [
        access,
        check_interruption_queue(facts),
        check_termination_handler(facts),
        check_termination_grace(facts, policy),
        check_checkpoint_annotations(facts, policy),
        check_checkpoint_gangs(facts, policy),
        check_checkpoint_coverage(facts, policy),
        check_static_gpu_limit(facts, policy),
        check_alert_node_labels(policy, facts.daemonsets, received, facts.nodes),
        check_eks_auto_mode(facts.nodes, facts.nodeclaims),
        check_karpenter_version(facts.karpenter_deployments),
        *(check.run(facts, policy, now) for check in kind_checks),
    ]
    return sorted(findings, key=lambda f: CLUSTER_CHECKS.index(f.check))


def diagnose(
    reads: DoctorReads | str,
    policy: Policy | None,
    policy_error: str | None,
    has_gpu_metric: Callable[[str], bool],
    now: datetime,
    cluster: str = "default",
    policy_source: str | None = "the policy",
    *,
    switches: Sequence[str],
    kind_checks: Sequence[KindCheck],
    received: Sequence[ReceivedAlert] | str | None = None,
) -> DoctorReport:
    """Every check. ``reads`` is the cluster, or why it could not be reached; ``policy`` is None
    when it does not validate (``policy_error`` says why; the cluster checks then use the defaults).
    ``switches``: every policy switch, as the kinds' specs name them (`kinds.registry.SWITCHES`);
    ``kind_checks``: the kinds' own checks (`kinds.registry.DOCTOR_CHECKS`), each reported at its
    name's place in `CLUSTER_CHECKS`.
    ``received``: the alerts last received (the state table's record), why they could not be read,
    or None (no state table)."""
    effective = policy or Policy(cluster=cluster)
    cluster_part = (
        _unreachable(reads)
        if isinstance(reads, str)
        else _cluster_findings(reads, effective, now, received, kind_checks)
    )
    findings = [
        *cluster_part,
        check_gpu_metrics(effective, has_gpu_metric),
        check_policy(policy, policy_error, now, policy_source),
        check_behaviours(effective, switches) if policy is not None or policy_error is None else _no_behaviours(),
    ]
    return DoctorReport(findings)
