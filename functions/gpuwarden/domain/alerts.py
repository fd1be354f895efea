"""Alertmanager alerts (docs/gpu-signals.md): one firing alert → one notice, its kind from the
policy's ``alerts`` map, its node from its labels. Pure: the caller passes the policy and the time
the notification was published.

dcgm-exporter's series, and so the seed's ``LowGPUUtilization`` rule, are per GPU: an alert that
carries a GPU label (``gpu``, ``UUID``, ``device``) is evidence for that GPU only. A node's notice
carries the GPUs its notification's firing alerts cover (``detail["gpus"]``) and whether one of
them, without a GPU label, covers the node (``detail["covers_node"]``); `coverage_refusal` decides,
given the node's accelerator count, whether that is enough for gpu-idle. One failing GPU is enough
for gpu-unhealthy."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.domain.gpu_health import DETAIL_ALERT, SOURCE_ALERT, alert_identity
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.policy import Policy

#: The kind an alert the policy does not map (or a notification with no alert) is reported as.
UNMAPPED_KIND = Kind.GPU_UNHEALTHY

#: The labels that name the node, first match wins: dcgm-exporter's ``Hostname`` (the node name),
#: kube-state-metrics / relabelled ``kubernetes_node`` and ``node``, an EC2 ``instance_id``.
NODE_LABELS = ("Hostname", "kubernetes_node", "node")
INSTANCE_LABEL = "instance_id"
#: The labels that name the cluster (a relabelled ``ClusterName``, or Prometheus' external label
#: ``cluster``), first match wins.
CLUSTER_LABELS = ("ClusterName", "cluster")
#: The labels dcgm-exporter names one GPU by, the most specific first; a MIG instance adds ``GPU_I_ID``.
GPU_LABELS = ("UUID", "gpu", "device")
MIG_INSTANCE_LABEL = "GPU_I_ID"


@dataclass(frozen=True)
class Alert:
    """One alert as Alertmanager rendered it (the JSON template, or the default text)."""

    name: str
    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: None: the rendering carries no time (the default text), or Go's zero time.
    starts_at: datetime | None = None
    fingerprint: str | None = None

    def target(self) -> tuple[str | None, str | None]:
        """(node name, instance id) from the labels."""
        node = next((self.labels[k] for k in NODE_LABELS if self.labels.get(k)), None)
        return node, self.labels.get(INSTANCE_LABEL) or None


def gpu_of(alert: Alert) -> str | None:
    """The one GPU (or MIG instance) an alert is about; None: the alert covers its whole node."""
    gpu = next((f"{k}={alert.labels[k]}" for k in GPU_LABELS if alert.labels.get(k)), None)
    instance = alert.labels.get(MIG_INSTANCE_LABEL)
    return f"{gpu}/{MIG_INSTANCE_LABEL}={instance}" if gpu and instance else gpu


def mapped_kind(alert: Alert, policy: Policy) -> Kind | None:
    kind = policy.alerts.get(alert.name)
    return Kind(kind) if kind is not None else None


def ignored_reason(alert: Alert, policy: Policy) -> str | None:
    """Why this alert asks nothing of gpuwarden (None: it is a notice)."""
    if alert.status != "firing":
        return f"alert {alert.name}: status {alert.status!r}, only a firing alert is acted on"
    if mapped_kind(alert, policy) is None:
        mapped = ", ".join(sorted(policy.alerts)) or "none"
        return f"alert {alert.name}: the policy's alerts map does not name it (mapped: {mapped})"
    return None


def alert_notice(
    alert: Alert,
    policy: Policy,
    published: datetime,
    *,
    instance_id: str | None,
    gpus: Sequence[str] = (),
    covers_node: bool | None = None,
) -> Notice:
    """A firing, mapped alert that names its node → its notice. The identity is the alert's own
    (fingerprint and startsAt): a repeated notification of the same alert is a duplicate, the same
    alert firing again after it resolved is a new notice. ``gpus`` / ``covers_node``: the evidence
    of the notification's alerts for the node (default: this alert's own)."""
    kind = mapped_kind(alert, policy)
    assert kind is not None  # the caller asked `ignored_reason` first
    node, _ = alert.target()
    started = alert.starts_at or published
    fingerprint = alert.fingerprint or alert_identity(dict(alert.labels))
    stamp = ann.rfc3339(alert.starts_at) if alert.starts_at else "no-start-time"
    deadline = started + policy.gpu_health.repair_after if kind is Kind.GPU_UNHEALTHY else None
    own = gpu_of(alert)
    detail: dict[str, object] = {
        "alertname": alert.name,
        "fingerprint": fingerprint,
        "evidence": "alert",
        "gpus": sorted(set(gpus) if gpus else ({own} if own else set())),
        "covers_node": own is None if covers_node is None else covers_node,
    }
    if kind is Kind.GPU_IDLE:
        detail["state"] = "ALARM"  # a firing alert is the idle state itself (no CloudWatch re-check)
    return Notice(
        kind=kind,
        event_id=f"alert/{alert.name[:100]}/{fingerprint[:32]}/{stamp}",
        node_name=node,
        instance_id=instance_id,
        deadline=deadline,
        event_time=started,
        source=SOURCE_ALERT,
        detail_type=DETAIL_ALERT,
        detail=detail,
        cluster=next((alert.labels[k] for k in CLUSTER_LABELS if alert.labels.get(k)), None),
    )


_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8}([0-9a-f]{9})?$")

#: An alert that asks nothing: (the kind it reports as, why).
Ignored = tuple[str, str]


def alert_plan(alerts: Sequence[Alert], policy: Policy, published: datetime) -> list[Notice | Ignored]:
    """Every alert of one notification → its notice, or why it is ignored; each node once (a
    dcgm-exporter alert fires per GPU: the node's first alert is its notice). A firing alert the
    policy maps but that names no node is input gpuwarden cannot act on: `InvalidEvent`, before
    anything is written."""
    missing = [
        i
        for i, a in enumerate(alerts)
        if ignored_reason(a, policy) is None and not _target_of(a)[0] and not _target_of(a)[1]
    ]
    if missing:
        where = [["alerts", i, "labels"] for i in missing]
        shown = ", ".join(f"alerts[{i}] ({alerts[i].name})" for i in missing[:5])
        msg = f"{shown}: no node label ({', '.join(NODE_LABELS)} or an EC2 {INSTANCE_LABEL})"
        raise InvalidEvent(f"Alertmanager notification: {msg}", errors=[{"loc": loc, "msg": msg} for loc in where])
    evidence = _evidence(alerts, policy)
    plan: list[Notice | Ignored] = []
    seen: dict[tuple[str, str], str] = {}
    for alert in alerts:
        kind = mapped_kind(alert, policy)
        reason = ignored_reason(alert, policy)
        if reason is not None:
            plan.append(((kind or UNMAPPED_KIND).value, reason))
            continue
        assert kind is not None
        node, instance = _target_of(alert)
        key = (kind.value, node or instance or "")
        if key in seen:
            plan.append((kind.value, f"alert {alert.name}: node {key[1]} is already this notification's {seen[key]}"))
            continue
        gpus, whole = evidence[key]
        notice = alert_notice(alert, policy, published, instance_id=instance, gpus=gpus, covers_node=whole)
        seen[key] = notice.event_id
        plan.append(notice)
    return plan


def _evidence(alerts: Sequence[Alert], policy: Policy) -> dict[tuple[str, str], tuple[list[str], bool]]:
    """Per (kind, node): the GPUs the notification's firing, mapped alerts name, and whether one
    without a GPU label covers the whole node."""
    found: dict[tuple[str, str], tuple[list[str], bool]] = {}
    for alert in alerts:
        kind = mapped_kind(alert, policy)
        if kind is None or ignored_reason(alert, policy) is not None:
            continue
        node, instance = _target_of(alert)
        gpus, whole = found.get((kind.value, node or instance or ""), ([], False))
        gpu = gpu_of(alert)
        found[(kind.value, node or instance or "")] = ([*gpus, gpu] if gpu else gpus, whole or gpu is None)
    return found


def coverage_refusal(notice: Notice, accelerators: int) -> str | None:
    """Why an alert's gpu-idle notice does not make its node idle (None: it does, or the notice is
    not a gpu-idle alert). ``accelerators``: the node's accelerator count
    (`accelerators.node_accelerator_count`). A node is idle only when one notification's alerts
    cover every one of its accelerators, or one of them covers the node."""
    detail = notice.detail
    if notice.kind is not Kind.GPU_IDLE or detail.get("evidence") != "alert" or detail.get("covers_node", True):
        return None
    gpus = [str(g) for g in detail.get("gpus") or ()]
    if accelerators > 0 and len(gpus) >= accelerators:
        return None
    shown = ", ".join(g.split("=", 1)[-1] for g in gpus[:8]) + (", …" if len(gpus) > 8 else "")
    return (
        f"alert {detail.get('alertname')}: this notification's alerts cover {len(gpus)} of the {accelerators} "
        f"GPUs of node {notice.node_name or notice.instance_id} ({shown}): a node is idle only when they cover "
        "every one (route the alerts with group_by: [alertname, Hostname])"
    )


def _target_of(alert: Alert) -> tuple[str | None, str | None]:
    node, instance = alert.target()
    return node, instance if instance and _INSTANCE_ID.match(instance) else None
