"""Doctor checks for clusters as teams already run them (docs/gpu-signals.md, "Prometheus and
Alertmanager"; docs/cluster.md, "EKS Auto Mode"): whether an Alertmanager alert's node label can
name a node, and what gpuwarden does for nodes of EKS Auto Mode. Pure: facts in, one Finding out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuwarden.domain.alerts import NODE_LABELS
from gpuwarden.domain.alerts_received import ReceivedAlert, unknown
from gpuwarden.domain.instance_labels import COMPUTE_TYPE_LABEL, is_auto_mode, is_auto_mode_class
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import NODEPOOL_LABEL, NodeView
from gpuwarden.domain.wording import count
from gpuwarden.services.doctor.facts import Finding, Severity, names

ALERT_CHECK = "alert-node-labels"
AUTO_MODE_CHECK = "eks-auto-mode"
DCGM_EXPORTER = "dcgm-exporter"
#: dcgm-exporter's own settings (NVIDIA/dcgm-exporter internal/pkg/hostname/hostname.go, GetHostname):
#: ``Hostname`` is the remote host engine's host when one is used, else ``NODE_NAME``, else the
#: container's hostname, which in a pod without host networking is the pod's name
NODE_NAME_ENV = "NODE_NAME"
REMOTE_ENGINE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"
REMOTE_ENGINE_FLAGS = ("-r", "--remote-hostengine-info")
_FIX = (
    "set env NODE_NAME from fieldRef spec.nodeName on the dcgm-exporter container (its Helm chart does), "
    "or overwrite the Hostname label with __meta_kubernetes_pod_node_name in the scrape's relabel_configs"
)


def is_dcgm_exporter(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        DCGM_EXPORTER in str(meta.get("name", ""))
        or DCGM_EXPORTER in (labels.get("app.kubernetes.io/name"), labels.get("app"))
        or any(DCGM_EXPORTER in str(c.get("image", "")) for c in _containers(obj))
    )


def _pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def _containers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(_pod_spec(obj).get("containers") or [])


def hostname_source(exporter: Mapping[str, Any]) -> tuple[bool, str]:
    """(whether its ``Hostname`` label is the node's name, where the label comes from)."""
    for container in _containers(exporter):
        env = {str(e.get("name")): e for e in container.get("env") or []}
        argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if REMOTE_ENGINE_ENV in env or any(a.split("=", 1)[0] in REMOTE_ENGINE_FLAGS for a in argv):
            return False, "the remote host engine's host (DCGM_REMOTE_HOSTENGINE_INFO / -r)"
        if NODE_NAME_ENV in env and (env[NODE_NAME_ENV].get("value") or env[NODE_NAME_ENV].get("valueFrom")):
            return True, "env NODE_NAME"
    if _pod_spec(exporter).get("hostNetwork"):
        return True, "the node's hostname (hostNetwork)"
    return False, "the exporter pod's own name (no NODE_NAME, no hostNetwork)"


def check_alert_node_labels(
    policy: Policy,
    daemonsets: Sequence[Mapping[str, Any]],
    received: Sequence[ReceivedAlert] | str | None = None,
    nodes: Sequence[NodeView] = (),
) -> Finding:
    """An alert mapped in ``alerts`` names its node by ``Hostname`` first (domain/alerts.py NODE_LABELS):
    a label that names no node makes every such alert 'not a node of the cluster'. The alerts last
    received (``received``: the state table's record; a str: why it could not be read; None: no state
    table to read) are the evidence; without them, dcgm-exporter's settings say where ``Hostname`` comes from."""
    if not policy.alerts:
        return Finding(ALERT_CHECK, Severity.OK, "no Alertmanager alert is mapped in the policy's alerts")
    exporters = _exporter_finding(policy, daemonsets)
    if isinstance(received, str) or received is None:
        why = received or "no state table (GPUWARDEN_STATE_TABLE) to read the alerts received from"
        return Finding(
            exporters.check, exporters.severity, f"{exporters.message}; alerts received not read: {why}", exporters.fix
        )
    records = [r for r in received if r.name in policy.alerts]
    if not records:
        return Finding(
            exporters.check, exporters.severity, f"{exporters.message}; no mapped alert received yet", exporters.fix
        )
    bad = unknown(records, policy.alerts, nodes)
    if bad:
        return Finding(
            ALERT_CHECK,
            Severity.WARN,
            f"the last alerts received name no node of the cluster: {names(bad)}: each is ignored as 'not a "
            f"node of the cluster'",
            exporters.fix or _FIX,
        )
    seen = sorted({t for r in records for t in r.targets})
    last = max(r.received_at for r in records)
    return Finding(
        ALERT_CHECK,
        exporters.severity,
        f"the last alerts received ({', '.join(r.name for r in records)}, latest {last}) name nodes of the "
        f"cluster: {names(seen)}; {exporters.message}",
        exporters.fix,
    )


def _exporter_finding(policy: Policy, daemonsets: Sequence[Mapping[str, Any]]) -> Finding:
    """What dcgm-exporter's settings say about its ``Hostname`` label."""
    mapped = ", ".join(sorted(policy.alerts))
    exporters = [d for d in daemonsets if is_dcgm_exporter(d)]
    if not exporters:
        return Finding(
            ALERT_CHECK,
            Severity.OK,
            f"alerts {mapped} are mapped; no dcgm-exporter DaemonSet in the cluster to check: their "
            f"{' / '.join(NODE_LABELS)} label must be the node's name",
        )
    wrong: list[str] = []
    right: list[str] = []
    for exporter in exporters:
        meta = exporter.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        ok, source = hostname_source(exporter)
        (right if ok else wrong).append(f"{where} ({source})")
    if wrong:
        return Finding(
            ALERT_CHECK,
            Severity.WARN,
            f"dcgm-exporter's Hostname label is not the node's name on {names(wrong)}: every alert of "
            f"{mapped} from it is ignored as 'not a node of the cluster'",
            _FIX,
        )
    return Finding(
        ALERT_CHECK, Severity.OK, f"alerts {mapped}: dcgm-exporter's Hostname is the node's name on {names(right)}"
    )


def check_eks_auto_mode(nodes: Sequence[NodeView], nodeclaims: Sequence[Mapping[str, Any]]) -> Finding:
    """Nodes of EKS Auto Mode, and what gpuwarden does for them (contract §3)."""
    auto = [n for n in nodes if is_auto_mode(n.labels)]
    claims = [c for c in nodeclaims if is_auto_mode_class((c.get("spec") or {}).get("nodeClassRef"))]
    if not auto and not claims:
        return Finding(AUTO_MODE_CHECK, Severity.OK, "no node of EKS Auto Mode (eks.amazonaws.com/compute-type: auto)")
    pools = sorted({n.labels.get(NODEPOOL_LABEL, "") for n in auto} - {""})
    return Finding(
        AUTO_MODE_CHECK,
        Severity.OK,
        f"{count(len(auto), 'node')} of EKS Auto Mode ({COMPUTE_TYPE_LABEL}: auto; "
        f"NodePools {names(pools) or 'none'}), {count(len(claims), 'NodeClaim')} on its eks.amazonaws.com "
        "NodeClass: gpuwarden treats them as Karpenter nodes "
        "(budgets, limits, expiry, do-not-disrupt), reads their eks.amazonaws.com/instance-* labels, launches "
        "replacements as NodeClaims of their NodePool's NodeClass, and expects no Karpenter Deployment: AWS runs "
        "Karpenter and its Spot interruption handling, gpuwarden cordons and asks for checkpoints beside it",
    )
