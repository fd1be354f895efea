"""`gpu-idle`: a GPU node idle long enough to be worth reclaiming (docs/events.md, docs/gpu-signals.md)."""

from collections.abc import Sequence
from typing import Any

from gpuwarden.domain.budgets import gpu_idle_reason
from gpuwarden.domain.decide import drain_with
from gpuwarden.domain.gpu_idle import GPU_METRICS
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.gpu_idle import policy
from gpuwarden.kinds.gpu_idle import use_case as gpu_idle
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine.hooks import Admission, KindHooks, Settlement
from gpuwarden.sources.cloudwatch import AlarmContributorStateChange, AlarmStateChange, why_not_gpu_idle
from gpuwarden.sources.rules import Rule, rule_of


def _alarm_detail(prefixes: Sequence[str]) -> dict[str, Any]:
    """ALARM, and (a GPU metric, a Metrics Insights query over one, or a configured name prefix)."""
    return {
        "state": {"value": ["ALARM"]},
        "$or": [
            {"alarmName": [{"prefix": p} for p in prefixes]},
            {"configuration": {"metrics": {"metricStat": {"metric": {"name": list(GPU_METRICS)}}}}},
            {"configuration": {"metrics": {"expression": [{"wildcard": f"*{m}*"} for m in GPU_METRICS]}}},
        ],
    }


def _rules(prefixes: Sequence[str]) -> tuple[Rule, ...]:
    return (
        rule_of("GpuIdleAlarm", "GPU-idle per-node alarms in ALARM", AlarmStateChange, detail=_alarm_detail(prefixes)),
        rule_of(
            "GpuIdleContributor",
            "GPU-idle fleet alarm: a node's contributor in ALARM",
            AlarmContributorStateChange,
            detail=_alarm_detail(prefixes),
        ),
    )


SPEC = KindSpec(
    kind=Kind.GPU_IDLE,
    summary="a GPU node has been idle: reclaim it",
    voluntary=True,
    route="gpu_signals",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(
            plan=drain_with("gpu idle: reclaiming the node", replace=False),
            guard=gpu_idle.guardrails,
            mark_extra=gpu_idle.claim_time,  # the cap's slot is taken with the mark itself
            after_mark=gpu_idle.within_cap,
            stopped=gpu_idle.skipped,
        ),
        settlement=Settlement(
            settle=gpu_idle.settle_round,  # retire the node once drained, give it back when blocked
            answer=gpu_idle.reclaimed,
        ),
    ),
    handle=gpu_idle.handle_gpu_idle,
    karpenter_reason=gpu_idle_reason,  # Empty, or Underutilized
    switch="gpu_idle.enabled",
    policy=policy.SECTION,
    models=(AlarmStateChange, AlarmContributorStateChange),
    rules=_rules,
    why_ignored=why_not_gpu_idle,
    samples=(
        "cloudwatch-alarm-state-change-gpu-idle.json",
        "cloudwatch-alarm-state-change-dcgm.json",
        "cloudwatch-alarm-state-change-metric-math.json",
        "cloudwatch-alarm-contributor-state-change.json",
        "cloudwatch-alarm-contributor-dcgm-metrics-insights.json",
        "cloudwatch-alarm-state-change-cpu.json",
        "cloudwatch-alarm-state-change-ok.json",
        # Alertmanager alerts the policy maps to gpu-idle, over SNS (docs/gpu-signals.md)
        "alertmanager-sns-per-gpu-partial.json",
        "alertmanager-sns-per-gpu-whole-node.json",
        "alertmanager-sns-by-node.json",
    ),
)
