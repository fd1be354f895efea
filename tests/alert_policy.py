"""The policy the Alertmanager samples' alerts are routed by (docs/gpu-signals.md), and the one notice a
captured notification plans under it: shared by the unit and integration tests of alerts."""

from __future__ import annotations

from gpuwarden.domain.alerts import alert_plan
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.policy import Policy
from gpuwarden.sources import AlertBatch

ALERTS_POLICY = Policy(
    cluster="ml-prod",
    alerts={"LowGPUUtilization": "gpu-idle", "LowGPUUtilizationByNode": "gpu-idle", "GPUXidError": "gpu-unhealthy"},
)


def planned(batch: AlertBatch) -> Notice:
    """The notification's one notice (one node per notification, as group_by [alertname, Hostname] sends)."""
    notices = [p for p in alert_plan(batch.alerts, ALERTS_POLICY, batch.published) if isinstance(p, Notice)]
    assert len(notices) == 1, notices
    return notices[0]
