"""doctor's `gpu-health` check (docs/gpu-signals.md), in the kind's room: does anything report GPU
health for the scan to find, does the scan's selector see those nodes, and is Karpenter's forceful
node repair on while gpuwarden's scan is off."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from gpuwarden.domain.accelerators import is_accelerator_node
from gpuwarden.domain.gpu_health import CONDITIONS, reports_gpu_health
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.predicates import requirement_matches
from gpuwarden.domain.views import NodeSelectorRequirement, NodeView
from gpuwarden.domain.wording import count
from gpuwarden.services.doctor.facts import ClusterFacts, Finding, KindCheck, Severity

CHECK = "gpu-health"


def _requirement(term: str) -> NodeSelectorRequirement:
    if "!=" in term:
        key, value = term.split("!=", 1)
        return NodeSelectorRequirement(key.strip(), "NotIn", (value.strip(),))
    if "=" in term:
        key, value = term.split("=", 1)
        return NodeSelectorRequirement(key.strip().rstrip("="), "In", (value.strip().lstrip("="),))
    if term.startswith("!"):
        return NodeSelectorRequirement(term[1:], "DoesNotExist")
    return NodeSelectorRequirement(term, "Exists")


def selects(selector: str, labels: Mapping[str, str]) -> bool:
    """The equality-based label selectors `gpu_health.node_selector` takes: `k`, `k=v`, `k!=v`, `!k`,
    comma-joined, each term read as the requirement it is (`predicates.requirement_matches`)."""
    terms = (t.strip() for t in selector.split(",") if t.strip())
    return all(requirement_matches(_requirement(term), labels) for term in terms)


def check_gpu_health(nodes: Sequence[NodeView], repairs: Sequence[str], policy: Policy) -> tuple[str, str, str]:
    """(severity, message, fix) for the `gpu-health` finding. ``repairs``: the Karpenter installs
    with `NodeRepair` on."""
    config = policy.gpu_health
    gpu_nodes = [n for n in nodes if is_accelerator_node(n)]  # as the scan finds them (docs/gpu-signals.md)
    reporting = [n for n in gpu_nodes if reports_gpu_health(n)]
    if repairs and not config.enabled:
        return (
            "warn",
            f"Karpenter's NodeRepair gate is on ({', '.join(repairs)}) while gpu_health.enabled is false: a node whose "
            "AcceleratedHardwareReady turns False is replaced 10 min later without a drain or a checkpoint",
            "set gpu_health.enabled: true in the policy (the stack then runs the GPU-health scan every minute)",
        )
    if not config.enabled:
        return "ok", "gpu_health.enabled is false: no GPU-health scan (Karpenter's NodeRepair is off)", ""
    if gpu_nodes and not reporting:
        return (
            "warn",
            f"none of {count(len(gpu_nodes), 'GPU node')} reports {' or '.join(CONDITIONS)}: "
            "gpu-unhealthy never fires from the scan",
            "install the EKS node monitoring agent (EKS add-on eks-node-monitoring-agent) or NVIDIA NVSentinel",
        )
    selected = [n for n in reporting if selects(config.node_selector, n.labels)]
    if reporting and not selected:
        return (
            "warn",
            f"gpu_health.node_selector {config.node_selector!r} matches none of the "
            f"{count(len(reporting), 'node')} that {'reports' if len(reporting) == 1 else 'report'} GPU health: "
            "the scan would list none of them",
            "set gpu_health.node_selector to a label those nodes carry, e.g. karpenter.k8s.aws/instance-gpu-count",
        )
    return (
        "ok",
        f"{len(selected)} of {count(len(gpu_nodes), 'GPU node')} {'reports' if len(selected) == 1 else 'report'} "
        f"GPU health and {'matches' if len(selected) == 1 else 'match'} the scan's selector",
        "",
    )


def _finding(facts: ClusterFacts, policy: Policy, now: datetime) -> Finding:
    severity, message, fix = check_gpu_health(facts.nodes, facts.node_repair, policy)
    return Finding(CHECK, Severity(severity), message, fix)


#: The kind's doctor check (`KindSpec.doctor`).
DOCTOR = KindCheck(CHECK, _finding)
