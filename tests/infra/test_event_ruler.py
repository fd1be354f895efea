"""The synthesized EventBridge rules judged by AWS's own matcher, Event Ruler (tests/ruler/judge.py).

Every ``AWS::Events::Rule`` of the template against every payload the repository holds (``events/``:
AWS's pages, NTH's and Karpenter's tests, the captured Alertmanager notifications, the node
conditions) and a set of near misses built from them: Event Ruler's answer, rule by rule, must equal
``gpuwarden.sources.rules.matches`` (what `gpuwarden invoke` and every handler apply), and the
functions the matched rules target must be exactly the one the event's kind is routed to
(``route_of_kind``), or none for an event gpuwarden does not take. Where the two matchers disagree,
Event Ruler is right (docs/events.md, "Judged by Event Ruler").
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import KIND_OF, route_of_kind
from gpuwarden.sources.rules import Rule, matches
from infra.components.gpu_idle import PREFIXES_CONTEXT
from tests.infra.conftest import USER_PREFIX, Synth
from tests.ruler.judge import judge

EVENTS = Path(__file__).resolve().parents[2] / "events"

#: samples in events/ that no deployed rule takes (events/README.md says why for each)
NOT_TAKEN = {
    "cloudwatch-alarm-state-change-cpu.json",  # CPUUtilization, no gpuwarden prefix
    "cloudwatch-alarm-state-change-metric-math.json",  # network traffic
    "cloudwatch-alarm-state-change-ok.json",  # state OK, not ALARM
}


@dataclass(frozen=True)
class Deployed:
    """A synthesized rule: its logical id, pattern and the routes (handler modules) of its targets."""

    logical_id: str
    pattern: dict[str, Any]
    routes: frozenset[str]


def deployed_rules(synth: Synth) -> list[Deployed]:
    handlers = {
        logical_id: props["Properties"]["Handler"].split(".")[2]  # gpuwarden.handlers.<route>.handler
        for logical_id, props in synth.resources("AWS::Lambda::Function").items()
        if str(props["Properties"].get("Handler", "")).startswith("gpuwarden.handlers.")
    }
    found = []
    for logical_id, resource in synth.resources("AWS::Events::Rule").items():
        props = resource["Properties"]
        if "EventPattern" not in props:
            continue
        targets = frozenset(handlers[t["Arn"]["Fn::GetAtt"][0]] for t in props["Targets"])
        found.append(Deployed(logical_id, props["EventPattern"], targets))
    return found


# --------------------------------------------------------------------------- the payloads


def samples() -> Iterator[tuple[str, Any, str | None]]:
    """Every JSON payload under events/, with the route it must reach (None: no rule takes it)."""
    for path in sorted(EVENTS.rglob("*.json")):
        name, event = str(path.relative_to(EVENTS)), json.loads(path.read_text())
        if isinstance(event, dict) and "detail_type" in event:
            # AWS's Capacity Block page prints the envelope with `detail_type`: no rule takes that form;
            # EventBridge delivers every event with `detail-type`, so the delivered form is judged too
            yield name, event, None
            event = {("detail-type" if k == "detail_type" else k): v for k, v in event.items()}
            name = f"{name} (as delivered)"
        eventbridge = isinstance(event, dict) and "detail-type" in event and "source" in event
        route = route_of_kind(KIND_OF[event["detail-type"]]) if eventbridge and path.name not in NOT_TAKEN else None
        yield name, event, route


def _load(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def _edit(name: str, change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    event = copy.deepcopy(_load(name))
    change(event)
    return event


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(event: dict[str, Any]) -> None:
        *parents, leaf = path.split("/")
        node: Any = event
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[leaf] = value

    return apply


GPU_ALARM = "cloudwatch-alarm-state-change-gpu-idle.json"
CONTRIBUTOR = "cloudwatch-alarm-contributor-state-change.json"
DCGM_ALARM = "cloudwatch-alarm-state-change-dcgm.json"
DCGM_INSIGHTS = "cloudwatch-alarm-contributor-dcgm-metrics-insights.json"
CPU_ALARM = "cloudwatch-alarm-state-change-cpu.json"


def near_misses() -> Iterator[tuple[str, Any, str | None]]:
    """Real payloads changed in one place: most must reach nothing, a few must still be taken."""
    yield (
        "spot: another EC2 detail-type",
        _edit("spot-interruption.json", _set("detail-type", "EC2 Spot Instance Request Fulfillment")),
        None,
    )
    yield "spot: a custom source", _edit("spot-interruption.json", _set("source", "custom.ec2")), None
    yield (
        "spot: detail-type in lower case",
        _edit("spot-interruption.json", _set("detail-type", "ec2 spot instance interruption warning")),
        None,
    )
    yield "state change: running", _edit("instance-state-change-stopping.json", _set("detail/state", "running")), None
    yield "state change: pending", _edit("instance-state-change-stopping.json", _set("detail/state", "pending")), None
    yield (
        "state change: STOPPING upper case",
        _edit("instance-state-change-stopping.json", _set("detail/state", "STOPPING")),
        None,
    )
    yield "health: RDS", _edit("health-scheduled-maintenance.json", _set("detail/service", "RDS")), None
    yield (
        "health: an issue, not a scheduled change",
        _edit("health-scheduled-maintenance.json", _set("detail/eventTypeCategory", "issue")),
        None,
    )
    yield "health: from aws.ec2", _edit("health-scheduled-maintenance.json", _set("source", "aws.ec2")), None
    yield "alarm: INSUFFICIENT_DATA", _edit(GPU_ALARM, _set("detail/state/value", "INSUFFICIENT_DATA")), None
    yield "alarm: OK contributor", _edit(CONTRIBUTOR, _set("detail/state/value", "OK")), None
    yield (
        "alarm: the prefix inside the name",
        _edit(CPU_ALARM, _set("detail/alarmName", "team-gpuwarden-gpu-idle-x")),
        None,
    )
    yield "alarm: the prefix in capitals", _edit(CPU_ALARM, _set("detail/alarmName", "GPUWARDEN-GPU-IDLE-x")), None
    yield "alarm: the prefix exactly", _edit(CPU_ALARM, _set("detail/alarmName", "gpuwarden-gpu-idle")), "gpu_signals"
    yield (
        "alarm: the user's configured prefix",
        _edit(CPU_ALARM, _set("detail/alarmName", f"{USER_PREFIX}x")),
        "gpu_signals",
    )
    yield "alarm: a prefix not configured", _edit(CPU_ALARM, _set("detail/alarmName", "team-b-idle-x")), None
    yield (
        "alarm: a GPU metric as the second of two",
        _edit(
            "cloudwatch-alarm-state-change-metric-math.json",
            _set("detail/configuration/metrics/2/metricStat/metric/name", "DCGM_FI_DEV_GPU_UTIL"),
        ),
        "gpu_signals",
    )
    yield (
        "alarm: GPU metric name as a prefix of another",
        _edit(DCGM_ALARM, _set("detail/configuration/metrics/0/metricStat/metric/name", "DCGM_FI_DEV_GPU_UTILX")),
        None,
    )
    yield (
        "alarm: GPU metric in another case",
        _edit(DCGM_ALARM, _set("detail/configuration/metrics/0/metricStat/metric/name", "dcgm_fi_dev_gpu_util")),
        None,
    )
    yield (
        "alarm: the metric under another key",
        _edit(
            DCGM_ALARM, _set("detail/configuration/metrics/0/metricStat/metric", {"metricName": "DCGM_FI_DEV_GPU_UTIL"})
        ),
        None,
    )
    yield (
        "alarm: the name an object",
        _edit(CPU_ALARM, _set("detail/alarmName", {"value": "gpuwarden-gpu-idle-x"})),
        None,
    )
    yield "alarm: the state a plain string", _edit(GPU_ALARM, _set("detail/state", "ALARM")), None
    yield "alarm: the state a list", _edit(GPU_ALARM, _set("detail/state/value", ["OK", "ALARM"])), "gpu_signals"
    yield "alarm: another account's GPU alarm", _edit(GPU_ALARM, _set("account", "210987654321")), "gpu_signals"
    yield (
        "insights: query over another metric",
        _edit(
            DCGM_INSIGHTS,
            _set(
                "detail/configuration/metrics/0/expression",
                'SELECT AVG(CPUUtilization) FROM SCHEMA("AWS/EC2", InstanceId)',
            ),
        ),
        None,
    )
    yield (
        "capacity block: another detail-type",
        _edit("capacity-block-delivered.json", _set("detail-type", "Capacity Block Delivered?")),
        None,
    )
    yield "rebalance: from aws.health", _edit("rebalance-recommendation.json", _set("source", "aws.health")), None
    yield (
        "alertmanager: resolved",
        _edit(
            "alertmanager-sns-json.json",
            _set(
                "Records/0/Sns/Message",
                _load("alertmanager-sns-json.json")["Records"][0]["Sns"]["Message"].replace("firing", "resolved"),
            ),
        ),
        None,
    )
    yield (
        "alertmanager: the notification itself as an event",
        json.loads(_load("alertmanager-sns-json.json")["Records"][0]["Sns"]["Message"]),
        None,
    )


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    name: str
    event: Any
    route: str | None
    ruler: frozenset[str]


def _table(rules: list[Deployed], payloads: list[tuple[str, Any, str | None]]) -> list[Row]:
    answers = judge({rule.logical_id: rule.pattern for rule in rules}, [event for _, event, _ in payloads])
    return [Row(name, event, route, ruler) for (name, event, route), ruler in zip(payloads, answers, strict=True)]


def _check(rules: list[Deployed], rows: list[Row]) -> None:
    by_id = {rule.logical_id: rule for rule in rules}
    disagreements = [
        f"{row.name}: {rule.logical_id} Event Ruler={rule.logical_id in row.ruler} matches={ours}"
        for row in rows
        for rule in rules
        if (ours := matches(rule.pattern, row.event)) != (rule.logical_id in row.ruler)
    ]
    assert disagreements == [], "\n".join(disagreements)
    misrouted = [
        f"{row.name}: delivered to {sorted(routes)}, its kind says {row.route}"
        for row in rows
        if (routes := frozenset().union(*(by_id[r].routes for r in row.ruler))) != ({row.route} if row.route else set())
    ]
    assert misrouted == [], "\n".join(misrouted)
    # `gpuwarden invoke` and the handlers take exactly what a deployed rule delivers, and ignore the rest
    deployed = [Rule(rule.logical_id, "", rule.pattern) for rule in rules]
    for row in rows:
        if not (isinstance(row.event, dict) and row.event.get("detail-type") in KIND_OF):
            continue
        try:
            taken = parse_notices(row.event, deployed=deployed).ignored is None
        except InvalidEvent:
            taken = True  # parsed because a rule took it (a malformed payload is an error, not an ignore)
        assert taken == bool(row.ruler), f"{row.name}: parse_notices takes={taken}, Event Ruler={sorted(row.ruler)}"


def test_event_ruler_agrees_with_matches_on_every_rule_and_payload(
    synth_with: Callable[[dict[str, Any]], Synth],
) -> None:
    # the template with a user's alarm prefix beside gpuwarden's own (assets not bundled: only the rules count)
    rules = deployed_rules(synth_with({PREFIXES_CONTEXT: USER_PREFIX}))
    payloads = [*samples(), *near_misses()]
    rows = _table(rules, payloads)
    _check(rules, rows)
    # every deployed rule is exercised by some payload, and the table is the size it claims
    assert {r.logical_id for r in rules} <= frozenset().union(*(row.ruler for row in rows))
    assert len(rules) >= 9, len(rules)
    assert len(payloads) >= 60, len(payloads)


@pytest.mark.parametrize(
    ("pattern", "event", "expected"),
    [
        ({"a": [{"prefix": "x"}]}, {"a": "xy"}, True),
        ({"a": [{"prefix": "x"}]}, {"a": ["z", "xy"]}, True),
        ({"a": {"b": ["1"], "c": ["2"]}}, {"a": [{"b": "1"}, {"c": "2"}]}, False),
        ({"a": [{"wildcard": "*G*U*"}]}, {"a": "aGbUc"}, True),
        ({"a": ["1"]}, {"a": 1}, False),
    ],
)
def test_event_ruler_the_judge_answers(pattern: dict[str, Any], event: dict[str, Any], expected: bool) -> None:
    """The judge itself: Event Ruler's semantics on the shapes the rules use (array elements, prefixes,
    array consistency, wildcards, types), independent of gpuwarden's matcher."""
    (answer,) = judge({"r": pattern}, [event])
    assert ("r" in answer) is expected
