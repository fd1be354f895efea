"""The stack creates nothing for a behaviour switched off in the policy (docs/policy.md#switches):
no alarm, rule, function or schedule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.infra.conftest import Synth

ALL_OFF = {
    "policy": {
        "gpu_idle": {"enabled": False},
        "gpu_health": {"enabled": False},
        "rebalance": {"enabled": False},
        "maintenance": {"enabled": False},
        "capacity_blocks": {"enabled": False},
        "nodepool_windows": {"enabled": False},
        "windows": [
            {"name": "night-cap", "schedule": "0 22 * * *", "timezone": "UTC", "duration": "8h", "max_disruptions": 2}
        ],
    }
}


def _rule_types(synth: Synth) -> set[str]:
    types: set[str] = set()
    for rule in synth.resources("AWS::Events::Rule").values():
        types |= set(rule["Properties"].get("EventPattern", {}).get("detail-type", []))
    return types


def _handlers(synth: Synth) -> set[str]:
    return {f["Properties"].get("Handler", "") for f in synth.resources("AWS::Lambda::Function").values()}


def test_switched_off_behaviours_get_no_alarm_rule_function_or_schedule(
    synth: Synth, synth_with: Callable[[dict[str, Any]], Synth]
) -> None:
    # Given the default policy (all on) and one with every switch off
    off = synth_with(ALL_OFF)
    assert off.error is None, off.error
    # Then the GPU-idle alarm, its rules and its function exist only when on
    assert synth.resources("AWS::CloudWatch::Alarm") != {}
    assert "gpuwarden.handlers.gpu_signals.handler" in _handlers(synth)
    assert "gpuwarden.handlers.gpu_signals.handler" not in _handlers(off)
    assert [k for k in synth.resources("AWS::CloudWatch::Alarm") if "FleetAlarm" in k]
    assert not [k for k in off.resources("AWS::CloudWatch::Alarm") if "FleetAlarm" in k]
    assert "CloudWatch Alarm State Change" in _rule_types(synth)
    assert "CloudWatch Alarm State Change" not in _rule_types(off)
    # And with GPU-idle off but the GPU-health scan on, the GPU function stays for the scan, without the alarm
    scan_only = synth_with({"policy": {"gpu_idle": {"enabled": False}}})
    assert "gpuwarden.handlers.gpu_signals.handler" in _handlers(scan_only)
    assert not [k for k in scan_only.resources("AWS::CloudWatch::Alarm") if "FleetAlarm" in k]
    assert "CloudWatch Alarm State Change" not in _rule_types(scan_only)
    # And no rebalance, AWS Health or Capacity-Block-delivered rule
    for detail_type in ("EC2 Instance Rebalance Recommendation", "AWS Health Event"):
        assert detail_type in _rule_types(synth)
        assert detail_type not in _rule_types(off)
    # But the warnings that are EC2 taking the node stay
    assert "EC2 Spot Instance Interruption Warning" in _rule_types(off)
    # And the window has no open/close schedule, only the reconcile
    on = synth_with({"policy": {"windows": ALL_OFF["policy"]["windows"]}})
    assert [k for k in on.resources("AWS::Scheduler::Schedule") if "nightcap" in k.lower()]
    assert not [k for k in off.resources("AWS::Scheduler::Schedule") if "nightcap" in k.lower()]
    assert off.resources("AWS::Scheduler::Schedule") != {}  # the reconcile
