"""The alerts gpuwarden last received, by alert name (docs/gpu-signals.md, "Checking the node label"):
what `gpuwarden doctor`'s ``alert-node-labels`` compares with the cluster's nodes. Pure.

An alert names its node by ``Hostname`` / ``kubernetes_node`` / ``node`` or an EC2 ``instance_id``
(`alerts.NODE_LABELS`). A label that names no node (dcgm-exporter's pod name, an IP address) makes
every such alert "not a node of the cluster"; the alerts actually received show it, whatever the
rule or the exporter's settings say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwarden.domain.alerts import INSTANCE_LABEL, NODE_LABELS, Alert
from gpuwarden.domain.views import NodeView

#: the distinct node label values kept per alert name: one notification's worth, bounded
MAX_TARGETS = 20


@dataclass(frozen=True)
class ReceivedAlert:
    """One alert name's last notification: the ``label=value`` pairs that named its nodes."""

    name: str
    targets: tuple[str, ...]
    received_at: str  # RFC 3339, as recorded


def target_label(alert: Alert) -> str | None:
    """``label=value`` of the label that names the alert's node (`Alert.target`'s order), None: none."""
    for key in (*NODE_LABELS, INSTANCE_LABEL):
        if alert.labels.get(key):
            return f"{key}={alert.labels[key]}"
    return None


def received(alerts: Iterable[Alert], at: datetime) -> list[ReceivedAlert]:
    """The firing alerts of one notification, by name, each with the node labels it carried."""
    by_name: dict[str, list[str]] = {}
    for alert in alerts:
        if alert.status != "firing":
            continue
        targets = by_name.setdefault(alert.name, [])
        label = target_label(alert) or "(no node label)"
        if label not in targets and len(targets) < MAX_TARGETS:
            targets.append(label)
    return [ReceivedAlert(name, tuple(targets), at.isoformat()) for name, targets in sorted(by_name.items())]


def names_no_node(target: str, nodes: Sequence[NodeView]) -> bool:
    """Whether ``label=value`` names none of ``nodes`` (an ``instance_id`` by the node's providerID)."""
    key, _, value = target.partition("=")
    if key == INSTANCE_LABEL:
        return value not in {n.instance_id for n in nodes}
    return value not in {n.name for n in nodes}


def unknown(records: Sequence[ReceivedAlert], mapped: Mapping[str, object], nodes: Sequence[NodeView]) -> list[str]:
    """``alertname: label=value`` for every mapped alert's received label that names no node."""
    return [f"{r.name}: {t}" for r in records if r.name in mapped for t in r.targets if names_no_node(t, nodes)]
