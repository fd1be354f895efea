"""Alertmanager notifications over SNS (docs/gpu-signals.md): both renderings, Go times, a truncated
message, and input that is neither rendering. The messages below follow AWS's JSON template and
Alertmanager 0.25's default.tmpl (`sns.default.message`); tests/integration/test_alertmanager_sns.py
checks both against a real Alertmanager."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuwarden.domain.alerts import alert_plan
from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.sources import AlertBatch
from gpuwarden.sources.sns import go_time

NODE = "ip-10-0-1-23.us-west-2.compute.internal"
POLICY = Policy(cluster="ml-prod", alerts={"GPUXidError": "gpu-unhealthy", "LowGPUUtilization": "gpu-idle"})


def alert(name: str, status: str = "firing", host: str | None = NODE, gpu: int = 0, **extra: str) -> dict[str, Any]:
    labels = {"alertname": name, "gpu": str(gpu), "modelName": "NVIDIA A100-SXM4-40GB"} | extra
    if host:
        labels["Hostname"] = host
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": "XID 79"},
        "startsAt": "2026-11-24 06:43:26.841 +0000 UTC",
        "endsAt": "0001-01-01 00:00:00 +0000 UTC",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": f"{abs(hash((name, gpu, host))):016x}"[:16],
    }


def sns_event(message: str, **attributes: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": "arn:aws:sns:us-west-2:123456789012:gpuwarden-alertmanager:1f0e",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": "95df01b4-ee98-5cb9-9903-4c221d41eb5e",
                    "TopicArn": "arn:aws:sns:us-west-2:123456789012:gpuwarden-alertmanager",
                    "Subject": "[FIRING] GPUXidError",
                    "Message": message,
                    "Timestamp": "2026-11-24T06:43:31.000Z",
                    "MessageAttributes": {k: {"Type": "String", "Value": v} for k, v in attributes.items()},
                },
            }
        ]
    }


def json_message(*alerts: dict[str, Any]) -> str:
    return json.dumps({"receiver": "gpuwarden", "source": "prometheus", "status": "firing", "alerts": list(alerts)})


def parsed(event: dict[str, Any]) -> AlertBatch:
    batch = parse_event(event)
    assert isinstance(batch, AlertBatch)
    return batch


def test_go_times_read_as_utc_and_the_zero_time_as_none() -> None:
    assert go_time("2026-11-24 06:43:26.841 +0000 UTC") == datetime(2026, 11, 24, 6, 43, 26, 841000, tzinfo=UTC)
    assert go_time("2026-11-24 15:43:26.123456789 +0900 KST") == datetime(2026, 11, 24, 6, 43, 26, 123456, tzinfo=UTC)
    assert go_time("0001-01-01 00:00:00 +0000 UTC") is None
    assert go_time("2026-11-24T06:43:26Z") == datetime(2026, 11, 24, 6, 43, 26, tzinfo=UTC)


def test_the_json_template_is_one_notice_per_firing_mapped_alert_and_each_node_once() -> None:
    # Given a notification with an XID alert on two GPUs of one node, a resolved one, an unmapped one
    event = sns_event(
        json_message(
            alert("GPUXidError"),
            alert("GPUXidError", gpu=1),
            alert("GPUXidError", "resolved", host="other"),
            alert("NodeDiskFull", host="x"),
        )
    )

    # When it is planned
    batch = parsed(event)
    plan = alert_plan(batch.alerts, POLICY, batch.published)

    # Then the node is one notice, with the repair deadline from startsAt; the rest ignored with the reason
    notices = [p for p in plan if isinstance(p, Notice)]
    assert len(notices) == 1
    [notice] = notices
    assert notice.kind is Kind.GPU_UNHEALTHY
    assert notice.node_name == NODE
    assert notice.deadline == datetime(2026, 11, 24, 6, 53, 26, 841000, tzinfo=UTC)
    reasons = [p[1] for p in plan if not isinstance(p, Notice)]
    assert any("already this notification's" in r for r in reasons)
    assert any("status 'resolved'" in r for r in reasons)
    assert any("does not name it" in r for r in reasons)


def test_a_gpu_idle_alert_is_its_own_evidence() -> None:
    batch = parsed(sns_event(json_message(alert("LowGPUUtilization"))))
    [notice] = alert_plan(batch.alerts, POLICY, batch.published)
    assert isinstance(notice, Notice)
    assert notice.kind is Kind.GPU_IDLE
    assert notice.detail["evidence"] == "alert"
    assert notice.detail["state"] == "ALARM"


DEFAULT_TEXT = """XID 79

Alerts Firing:
Labels:
 - Hostname = ip-10-0-1-23.us-west-2.compute.internal
 - alertname = GPUXidError
 - gpu = 1
Annotations:
 - summary = XID 79
Source: http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS

"""


def test_alertmanagers_default_text_is_read_without_times_or_fingerprints() -> None:
    batch = parsed(sns_event(DEFAULT_TEXT))
    assert batch.rendering == "text"
    [notice] = alert_plan(batch.alerts, POLICY, batch.published)
    assert isinstance(notice, Notice)
    assert notice.node_name == NODE
    assert notice.deadline == datetime(2026, 11, 24, 6, 53, 31, tzinfo=UTC)  # SNS publish time + 10 min


def test_a_truncated_message_keeps_the_alerts_that_survived_and_reports_the_rest() -> None:
    full = json_message(*(alert("GPUXidError", host=f"node-{i}.ec2.internal") for i in range(6)))
    cut = full[: full.index("node-4") - 40]
    batch = parsed(sns_event(cut, truncated="true"))
    assert len(batch.alerts) == 4
    assert batch.lost is not None
    assert "4 complete alerts read" in batch.lost


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (sns_event("hello, this is not an alert"), "Records.0.Sns.Message"),
        (sns_event('{"alerts": [ {"status": "firing"'), "Records.0.Sns.Message"),
        (sns_event(json_message(alert("GPUXidError", status="pending"))), "status"),
        (sns_event(json_message(alert("GPUXidError") | {"startsAt": "yesterday"})), "startsAt"),
    ],
)
def test_a_notification_that_is_neither_rendering_names_the_field(event: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidEvent) as raised:
        parse_event(event)
    assert field in str(raised.value)


def test_a_firing_mapped_alert_without_a_node_label_is_refused_before_anything_is_written() -> None:
    batch = parsed(sns_event(json_message(alert("GPUXidError"), alert("GPUXidError", host=None, gpu=3))))
    with pytest.raises(InvalidEvent) as raised:
        alert_plan(batch.alerts, POLICY, batch.published)
    assert "alerts[1] (GPUXidError): no node label" in str(raised.value)


def test_a_policy_alerts_entry_naming_an_unknown_kind_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"alerts\.GPUXidError"):
        Policy(cluster="ml-prod", alerts={"GPUXidError": "gpu-broken"})  # type: ignore[dict-item]
    with pytest.raises(ValidationError, match=r"gpu_health\.max_unhealthy_percent"):
        Policy.model_validate({"cluster": "ml-prod", "gpu_health": {"max_unhealthy_percent": 101}})
    with pytest.raises(ValidationError, match=r"gpu_health\.repair_after"):
        Policy.model_validate({"cluster": "ml-prod", "gpu_health": {"repair_after": "soon"}})
