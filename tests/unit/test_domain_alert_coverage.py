"""One alert per GPU (domain.alerts): an alert with a GPU label is evidence for that GPU only; a node is
gpu-idle only when one notification's alerts cover all its accelerators; an alert without a GPU label
covers its node; one failing GPU is enough for gpu-unhealthy. The events/alertmanager-sns-per-gpu-*
and -by-node notifications were captured from real Prometheus and Alertmanager
(tests/integration/test_alertmanager_per_gpu.py, events/README.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.alerts import Alert, alert_plan, coverage_refusal, gpu_of
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.sources import AlertBatch
from tests.alert_policy import ALERTS_POLICY, planned

EVENTS = Path(__file__).resolve().parents[2] / "events"


def captured(name: str) -> AlertBatch:
    batch = parse_event(json.loads((EVENTS / f"alertmanager-sns-{name}.json").read_text()))
    assert isinstance(batch, AlertBatch)
    return batch


# ------------------------------------------------------------------------------ captured notifications


def test_six_idle_gpus_of_eight_do_not_make_a_node_idle() -> None:
    # Given the notification real Alertmanager sent for the node whose GPUs 0-1 serve Triton
    notice = planned(captured("per-gpu-partial"))
    # When its 8 accelerators are weighed against the alerts
    why = coverage_refusal(notice, 8)
    # Then it is not idle, and the reason names how many of its GPUs the alerts cover
    assert why is not None
    assert why.startswith("alert LowGPUUtilization: this notification's alerts cover 6 of the 8 GPUs of node ")
    assert notice.detail["covers_node"] is False


def test_alerts_for_every_gpu_make_the_node_idle() -> None:
    notice = planned(captured("per-gpu-whole-node"))
    assert len(notice.detail["gpus"]) == 2
    assert coverage_refusal(notice, 2) is None
    assert coverage_refusal(notice, 4) is not None  # had the node four, two would not be enough


def test_an_alert_aggregated_by_node_covers_the_node() -> None:
    notice = planned(captured("by-node"))
    assert (notice.detail["gpus"], notice.detail["covers_node"]) == ([], True)
    assert coverage_refusal(notice, 8) is None


# ------------------------------------------------------------------------------ the rule itself


def gpu_alert(name: str, index: int | None, **labels: str) -> Alert:
    """An alert as dcgm-exporter's labels make it (``index`` None: a rule aggregated by node)."""
    base = {"alertname": name, "Hostname": "n1"}
    if index is not None:
        base |= {"gpu": str(index), "UUID": f"GPU-{index:04d}", "device": f"nvidia{index}"}
    base |= labels
    return Alert(name=name, status="firing", labels=base, fingerprint=f"{name}-{index}-{sorted(labels.items())}")


def notice_of(*alerts: Alert) -> Notice:
    plan = alert_plan(alerts, ALERTS_POLICY, datetime(2026, 11, 24, 6, 43, tzinfo=UTC))
    return next(p for p in plan if isinstance(p, Notice))


def test_an_alert_names_its_gpu_by_uuid_and_a_mig_instance_by_its_id() -> None:
    assert gpu_of(gpu_alert("LowGPUUtilization", 3)) == "UUID=GPU-0003"
    assert gpu_of(gpu_alert("LowGPUUtilization", None, gpu="1")) == "gpu=1"
    assert gpu_of(gpu_alert("LowGPUUtilization", 1, GPU_I_ID="2")) == "UUID=GPU-0001/GPU_I_ID=2"
    assert gpu_of(gpu_alert("LowGPUUtilization", None)) is None


def test_seven_mig_slices_of_one_gpu_are_seven_accelerators() -> None:
    slices = [gpu_alert("LowGPUUtilization", 0, GPU_I_ID=str(i)) for i in range(7)]
    assert coverage_refusal(notice_of(*slices), 7) is None
    assert coverage_refusal(notice_of(*slices[:6]), 7) is not None


def test_one_failing_gpu_is_enough_for_gpu_unhealthy() -> None:
    notice = notice_of(gpu_alert("GPUXidError", 5))
    assert notice.kind is Kind.GPU_UNHEALTHY
    assert coverage_refusal(notice, 8) is None


def test_a_node_with_no_allocatable_accelerator_is_not_idle_by_per_gpu_alerts() -> None:
    assert "cover 1 of the 0 GPUs" in str(coverage_refusal(notice_of(gpu_alert("LowGPUUtilization", 0)), 0))


@pytest.mark.parametrize("repeat", [1, 2])
def test_the_same_gpu_alerted_twice_counts_once(repeat: int) -> None:
    alerts: list[Any] = [gpu_alert("LowGPUUtilization", 0) for _ in range(repeat)] + [gpu_alert("LowGPUUtilization", 1)]
    assert coverage_refusal(notice_of(*alerts), 2) is None
    assert notice_of(*alerts).detail["gpus"] == ["UUID=GPU-0000", "UUID=GPU-0001"]
