"""The GPU-health scan's schedule and the Alertmanager topic, as synthesized (docs/gpu-signals.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpuwarden.sources import parse_scan_tick
from tests.infra.conftest import Synth

GPU_HANDLER = "gpuwarden.handlers.gpu_signals.handler"


def _gpu_function(synth: Synth) -> str:
    return next(
        k for k, v in synth.resources("AWS::Lambda::Function").items() if v["Properties"]["Handler"] == GPU_HANDLER
    )


def test_the_scan_runs_every_minute_on_the_gpu_function_with_its_own_input(
    synth_with: Callable[[dict[str, Any]], Synth],
) -> None:
    synth = synth_with({})
    assert synth.error is None, synth.error
    [scan] = [
        s
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if "GPU-health" in s["Properties"]["Description"]
    ]
    props = scan["Properties"]
    assert props["ScheduleExpression"] == "rate(1 minute)"
    assert props["Target"]["Arn"]["Fn::GetAtt"][0] == _gpu_function(synth)
    tick = parse_scan_tick(json.loads(props["Target"]["Input"]))
    assert tick.scheduled_time is None  # the context keywords read as "not given" until Scheduler fills them
    assert "DeadLetterConfig" in props["Target"]


def test_the_alertmanager_topic_is_encrypted_lets_prometheus_publish_and_feeds_the_gpu_function(
    synth_with: Callable[[dict[str, Any]], Synth],
) -> None:
    synth = synth_with({})
    [(name, topic)] = [(k, v) for k, v in synth.resources("AWS::SNS::Topic").items() if "Alertmanager" in k]
    assert "KmsMasterKeyId" in topic["Properties"]
    policies = [
        p for p in synth.resources("AWS::SNS::TopicPolicy").values() if {"Ref": name} in p["Properties"]["Topics"]
    ]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    publish = next(s for s in statements if s.get("Sid") == "PrometheusPublishes")
    assert publish["Principal"] == {"Service": "aps.amazonaws.com"}
    assert "aws:SourceAccount" in publish["Condition"]["StringEquals"]
    assert any(s["Effect"] == "Deny" and "aws:SecureTransport" in json.dumps(s) for s in statements)
    [subscription] = [
        s for s in synth.resources("AWS::SNS::Subscription").values() if s["Properties"]["TopicArn"] == {"Ref": name}
    ]
    assert subscription["Properties"]["Protocol"] == "lambda"
    assert subscription["Properties"]["Endpoint"]["Fn::GetAtt"][0] == _gpu_function(synth)


def test_gpu_health_switched_off_creates_no_scan_and_no_topic(synth_with: Callable[[dict[str, Any]], Synth]) -> None:
    synth = synth_with({"policy": {"gpu_health": {"enabled": False}}})
    assert synth.error is None, synth.error
    assert not [
        s
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if "GPU-health" in s["Properties"]["Description"]
    ]
    assert not [k for k in synth.resources("AWS::SNS::Topic") if "Alertmanager" in k]
