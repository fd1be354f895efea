"""Dashboard, alarms and where they go (the synthesized template)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuwarden.observability import Metric
from infra.app import STACK_NAME
from tests.infra.conftest import FULL_CONTEXT, Synth

TOPIC = "arn:aws:sns:us-west-2:123456789012:gpuwarden-alarms"


def dashboard_body(synth: Synth) -> dict[str, Any]:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    text = body if isinstance(body, str) else "".join(p if isinstance(p, str) else "TOKEN" for p in body["Fn::Join"][1])
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def _widgets(synth: Synth) -> dict[str, list[Any]]:
    return {w["properties"]["title"]: w["properties"]["metrics"] for w in dashboard_body(synth)["widgets"]}


def _alarms(synth: Synth) -> list[dict[str, Any]]:
    return [a["Properties"] for a in synth.resources("AWS::CloudWatch::Alarm").values()]


def _notifying_alarms(synth: Synth) -> list[dict[str, Any]]:
    """The alarms registered with the stack's AlarmSink (not trigger alarms such as GPU-idle's)."""
    from aws_cdk import Stack

    stack = synth.app.node.find_child(STACK_NAME)
    assert isinstance(stack, Stack)
    ids = {stack.get_logical_id(a.node.default_child) for a in stack.alarms.alarms}  # type: ignore[attr-defined]
    resources = synth.resources("AWS::CloudWatch::Alarm")
    assert ids <= set(resources)
    return [resources[i]["Properties"] for i in sorted(ids)]


@pytest.mark.parametrize(
    ("title", "metrics"),
    [
        ("Seconds left at drain end", [Metric.SECONDS_LEFT_AT_DRAIN_END, Metric.DRAINS_PAST_DEADLINE]),
        ("Checkpoints", [Metric.CHECKPOINT_REQUESTS, Metric.CHECKPOINT_ACKS, Metric.CHECKPOINT_TIMEOUTS]),
        ("Evictions", [Metric.PODS_EVICTED, Metric.EVICTIONS_BLOCKED, Metric.PODS_DELETED]),
        ("Nodes", [Metric.REPLACEMENTS, Metric.NODES_CORDONED, Metric.NODES_LOST_UNDRAINED]),
        ("GPU health: scans", [Metric.GPU_HEALTH_SCANS, Metric.GPU_HEALTH_UNHEALTHY]),
        ("GPU health breaker", [Metric.GPU_HEALTH_HELD_BACK]),
    ],
)
def test_dashboard_graphs_gpuwarden_metrics_by_their_names(synth: Synth, title: str, metrics: list[Metric]) -> None:
    (rows,) = [m for t, m in _widgets(synth).items() if t.startswith(title)]
    shown = {row[1] for row in rows if row[0] == "Gpuwarden"}
    assert {m.value for m in metrics} <= shown
    for row in rows:
        if row[0] == "Gpuwarden":
            assert row[2:4] == ["service", "gpuwarden"]  # Powertools' default dimension


def test_dashboard_searches_events_by_kind_and_outcome_and_per_function_and_queue_health(synth: Synth) -> None:
    expressions = [
        option["expression"]
        for rows in _widgets(synth).values()
        for row in rows
        for option in row
        if isinstance(option, dict) and "expression" in option
    ]
    assert "SEARCH('{Gpuwarden,kind,outcome,service} MetricName=\"Events\"', 'Sum', 300)" in expressions
    for metric in ("Errors", "Throttles", "Duration"):
        assert any(f'{{AWS/Lambda,FunctionName}} MetricName="{metric}" Gpuwarden-ml-test' in e for e in expressions)
    assert any(
        '{AWS/SQS,QueueName} MetricName="ApproximateNumberOfMessagesVisible" Gpuwarden-ml-test' in e
        for e in expressions
    )


def test_every_gpuwarden_function_has_error_and_throttle_alarms(synth: Synth) -> None:
    functions = {
        k
        for k, f in synth.resources("AWS::Lambda::Function").items()
        if f["Properties"]["Handler"].startswith("gpuwarden.handlers.")
        and "cluster_access" not in f["Properties"]["Handler"]
    }
    for metric in ("Errors", "Throttles"):
        alarmed = {
            a["Dimensions"][0]["Value"]["Ref"]
            for a in _alarms(synth)
            if a.get("MetricName") == metric and a.get("Namespace") == "AWS/Lambda"
        }
        assert functions <= alarmed, metric


def test_a_drain_past_its_deadline_raises_an_alarm(synth: Synth) -> None:
    (alarm,) = [a for a in _alarms(synth) if a.get("MetricName") == Metric.DRAINS_PAST_DEADLINE.value]
    assert alarm["Namespace"] == "Gpuwarden"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "gpuwarden"}]
    assert alarm["Statistic"] == "Sum"
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"


def _alarm_topics(synth: Synth) -> dict[str, dict[str, Any]]:
    """The SNS topics for alarms (the Alertmanager topic is docs/gpu-signals.md's, tested apart)."""
    return {k: v for k, v in synth.resources("AWS::SNS::Topic").items() if "Alertmanager" not in k}


def test_without_a_topic_alarms_have_no_actions(synth: Synth) -> None:
    assert _alarm_topics(synth) == {}
    assert all("AlarmActions" not in a for a in _alarms(synth))


def test_alarm_email_creates_an_encrypted_topic_every_alarm_notifies(synth_with: Any) -> None:
    synth = synth_with(FULL_CONTEXT)
    ((topic_id, topic),) = _alarm_topics(synth).items()
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = synth.template_json["Resources"][key_id]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert any(
        st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        for st in key["Properties"]["KeyPolicy"]["Statement"]
    )
    (subscription,) = [
        s
        for s in synth.resources("AWS::SNS::Subscription").values()
        if s["Properties"]["TopicArn"] == {"Ref": topic_id}
    ]
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "sre@example.com"
    (policy,) = [
        p for p in synth.resources("AWS::SNS::TopicPolicy").values() if {"Ref": topic_id} in p["Properties"]["Topics"]
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} and st["Action"] == "sns:Publish"
        for st in statements
    )
    assert any(st["Effect"] == "Deny" and "aws:SecureTransport" in json.dumps(st["Condition"]) for st in statements)
    alarms = _notifying_alarms(synth)
    assert len(alarms) >= 8
    for alarm in alarms:
        assert alarm["AlarmActions"] == [{"Ref": topic_id}], alarm.get("AlarmDescription")
        assert alarm["OKActions"] == [{"Ref": topic_id}]


def test_alarm_topic_arn_is_used_as_it_is(synth_with: Any) -> None:
    synth = synth_with({"alarmTopicArn": TOPIC})
    assert _alarm_topics(synth) == {}
    for alarm in _notifying_alarms(synth):
        assert alarm["AlarmActions"] == [TOPIC]
