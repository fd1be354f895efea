"""gpuwarden.sources: every input shape → the domain, from the AWS-documented samples in events/."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.domain.gpu_idle import IdleMetric
from gpuwarden.domain.notice import SPOT_NOTICE_SECONDS, Kind, Notice
from gpuwarden.kinds.inputs import DETAIL_TYPES, parse_event, parse_notices
from gpuwarden.kinds.registry import route_of_kind
from gpuwarden.sources import AlertBatch, NoticeBatch, RunbookRequest, ScanTick, SchedulerTick, parse_runbook

EVENTS = Path(__file__).resolve().parents[2] / "events"
INSTANCE = "i-0abc1234def567890"
NODE = "ip-10-0-1-23.us-west-2.compute.internal"


def load(name: str) -> dict[str, Any]:
    data = json.loads((EVENTS / name).read_text())
    assert isinstance(data, dict)
    return data


def only_notice(batch: NoticeBatch) -> Notice:
    assert batch.ignored is None
    assert len(batch.notices) == 1
    return batch.notices[0]


def invalid(raw: object) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as caught:
        parse_event(raw)
    return caught.value


def error_locs(error: InvalidEvent) -> list[list[object]]:
    return [list(e["loc"]) for e in error.errors]  # type: ignore[call-overload]


# --- every sample parses into the right kind / instance / deadline / route --------------------


@pytest.mark.parametrize(
    ("sample", "route", "kind", "deadline"),
    [
        ("spot-interruption.json", "interruption", Kind.SPOT_INTERRUPTION, "2026-06-01T14:04:10+00:00"),
        ("rebalance-recommendation.json", "interruption", Kind.REBALANCE, None),
        (
            "instance-state-change-terminated.json",
            "interruption",
            Kind.INSTANCE_STOPPING,
            "2026-06-01T14:04:31+00:00",
        ),
        (
            "instance-state-change-stopping.json",
            "interruption",
            Kind.INSTANCE_STOPPING,
            "2026-06-01T14:04:12+00:00",
        ),
        (
            "health-scheduled-maintenance.json",
            "planning",
            Kind.SCHEDULED_MAINTENANCE,
            "2026-06-05T05:00:00+00:00",
        ),
        ("cloudwatch-alarm-state-change-gpu-idle.json", "gpu_signals", Kind.GPU_IDLE, None),
        ("cloudwatch-alarm-contributor-state-change.json", "gpu_signals", Kind.GPU_IDLE, None),
        ("cloudwatch-alarm-state-change-dcgm.json", "gpu_signals", Kind.GPU_IDLE, None),
        ("cloudwatch-alarm-contributor-dcgm-metrics-insights.json", "gpu_signals", Kind.GPU_IDLE, None),
        (
            "capacity-reservation-interruption.json",
            "interruption",
            Kind.CAPACITY_RESERVATION_INTERRUPTION,
            "2026-06-01T14:04:10+00:00",
        ),
        (
            "capacity-reservation-interruption-interruptible-spelling.json",
            "interruption",
            Kind.CAPACITY_RESERVATION_INTERRUPTION,
            "2026-06-01T14:04:10+00:00",  # the termination time is a placeholder: time + 120 s
        ),
    ],
)
def test_each_aws_sample_becomes_one_notice_for_the_demo_instance(
    sample: str, route: str, kind: Kind, deadline: str | None
) -> None:
    # Given an AWS-documented sample event
    raw = load(sample)
    # When it is parsed
    batch = parse_event(raw)
    # Then it is one notice of the right kind, for the demo instance, with the right deadline
    assert isinstance(batch, NoticeBatch)
    assert route_of_kind(batch.kind) == route
    notice = only_notice(batch)
    assert notice.kind is kind
    assert notice.instance_id == INSTANCE
    assert notice.deadline == (datetime.fromisoformat(deadline) if deadline else None)
    assert notice.event_id.startswith(raw["id"])
    assert notice.event_time == datetime.fromisoformat(raw["time"])
    assert (notice.source, notice.detail_type) == (raw["source"], raw["detail-type"])
    assert (notice.region, notice.account) == ("us-west-2", "123456789012")


def test_every_accepted_detail_type_has_a_sample() -> None:
    samples = {load(p.name).get("detail-type", load(p.name).get("detail_type")) for p in EVENTS.glob("*.json")}
    assert set(DETAIL_TYPES) <= samples


def test_parse_notices_gives_the_same_batch_as_parse_event() -> None:
    raw = load("spot-interruption.json")
    assert parse_notices(raw) == parse_event(raw)


def test_notices_are_frozen() -> None:
    notice = only_notice(parse_notices(load("spot-interruption.json")))
    with pytest.raises(ValueError, match="frozen"):
        notice.instance_id = "i-00000000"  # type: ignore[misc]


# --- EC2 --------------------------------------------------------------------------------------


def test_spot_warning_deadline_is_event_time_plus_two_minutes() -> None:
    raw = load("spot-interruption.json")
    notice = only_notice(parse_notices(raw))
    assert notice.deadline == notice.event_time + timedelta(seconds=SPOT_NOTICE_SECONDS)
    assert notice.detail == {"instance_action": "terminate"}


@pytest.mark.parametrize("action", ["stop", "terminate"])
def test_spot_warning_keeps_the_instance_action(action: str) -> None:
    raw = load("spot-interruption.json")
    raw["detail"]["instance-action"] = action
    notice = only_notice(parse_notices(raw))
    assert notice.detail["instance_action"] == action
    assert notice.deadline == notice.event_time + timedelta(seconds=SPOT_NOTICE_SECONDS)


def test_spot_hibernation_has_no_two_minutes_so_the_deadline_is_the_event_time() -> None:
    # Given a warning for a Spot instance that hibernates ("begins immediately", EC2 docs)
    raw = load("spot-interruption.json")
    raw["detail"]["instance-action"] = "hibernate"
    # Then the deadline is now, not two minutes from now
    notice = only_notice(parse_notices(raw))
    assert notice.deadline == notice.event_time
    assert notice.detail["instance_action"] == "hibernate"


def test_state_change_keeps_the_state() -> None:
    notice = only_notice(parse_notices(load("instance-state-change-terminated.json")))
    assert notice.detail == {"state": "terminated"}


@pytest.mark.parametrize("state", ["stopping", "stopped", "shutting-down", "terminated"])
def test_every_losing_state_is_an_instance_stopping_notice(state: str) -> None:
    raw = load("instance-state-change-terminated.json")
    raw["detail"]["state"] = state
    assert only_notice(parse_notices(raw)).kind is Kind.INSTANCE_STOPPING


@pytest.mark.parametrize("state", ["pending", "running"])
def test_an_instance_starting_is_ignored_with_a_reason(state: str) -> None:
    raw = load("instance-state-change-terminated.json")
    raw["detail"]["state"] = state
    batch = parse_notices(raw)
    assert batch.notices == ()
    assert batch.ignored is not None
    assert state in batch.ignored
    assert INSTANCE in batch.ignored


# --- AWS Health -------------------------------------------------------------------------------


def test_health_start_time_in_rfc_2822_is_the_deadline_and_detail_is_kept() -> None:
    notice = only_notice(parse_notices(load("health-scheduled-maintenance.json")))
    assert notice.deadline == datetime(2026, 6, 5, 5, 0, tzinfo=UTC)
    assert notice.detail["event_type_code"] == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
    assert notice.detail["event_arn"].startswith("arn:aws:health:us-west-2::event/AWS_EC2_INSTANCE_RETIREMENT")
    assert notice.detail["end_time"] is None


@pytest.mark.parametrize(
    ("start_time", "expected"),
    [
        ("Fri, 3 Jun 2022 05:01:10 GMT", datetime(2022, 6, 3, 5, 1, 10, tzinfo=UTC)),  # one-digit day
        ("Thu, 27 Jan 2026 13:44:13 GMT", datetime(2026, 1, 27, 13, 44, 13, tzinfo=UTC)),  # wrong weekday
        ("2026-06-05T05:00:00Z", datetime(2026, 6, 5, 5, 0, tzinfo=UTC)),
    ],
)
def test_health_start_time_formats_seen_in_aws_docs_parse(start_time: str, expected: datetime) -> None:
    raw = load("health-scheduled-maintenance.json")
    raw["detail"]["startTime"] = start_time
    raw["detail"]["endTime"] = "Fri, 05 Jun 2026 07:00:00 GMT"
    notice = only_notice(parse_notices(raw))
    assert notice.deadline == expected
    assert notice.detail["end_time"] == datetime(2026, 6, 5, 7, 0, tzinfo=UTC)


def test_health_event_with_several_instances_gives_one_notice_each_with_its_own_key() -> None:
    raw = load("health-scheduled-maintenance.json")
    other = "i-0fedcba9876543210"
    raw["detail"]["affectedEntities"] = [
        {"entityValue": f"arn:aws:ec2:us-west-2:123456789012:instance/{INSTANCE}"},
        {"entityValue": other},
        {"entityValue": INSTANCE},  # the same instance twice: one notice
        {"entityValue": "vol-0123456789abcdef0"},  # not an instance
    ]
    batch = parse_notices(raw)
    assert [n.instance_id for n in batch.notices] == [INSTANCE, other]
    assert [n.event_id for n in batch.notices] == [f"{raw['id']}:{INSTANCE}", f"{raw['id']}:{other}"]


def test_older_health_event_names_its_instances_only_in_resources() -> None:
    raw = load("health-scheduled-maintenance.json")
    del raw["detail"]["affectedEntities"]
    raw["resources"] = [INSTANCE]
    assert only_notice(parse_notices(raw)).instance_id == INSTANCE


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("service", "RDS", "not an EC2 scheduled change"),
        ("eventTypeCategory", "issue", "not an EC2 scheduled change"),
        ("statusCode", "closed", "closed"),
        ("affectedEntities", [], "names no EC2 instance"),
    ],
)
def test_health_event_that_is_not_ours_is_ignored_with_a_reason(field: str, value: object, reason: str) -> None:
    raw = load("health-scheduled-maintenance.json")
    raw["detail"][field] = value
    batch = parse_notices(raw)
    assert route_of_kind(batch.kind) == "planning"
    assert batch.notices == ()
    assert batch.ignored is not None
    assert reason in batch.ignored


def test_health_start_time_that_is_not_a_date_names_the_field() -> None:
    raw = load("health-scheduled-maintenance.json")
    raw["detail"]["startTime"] = "Someday, soon"
    assert ["detail", "startTime"] in error_locs(invalid(raw))


# --- CloudWatch -------------------------------------------------------------------------------


def test_gpu_idle_alarm_names_instance_and_node_and_keeps_alarm_facts() -> None:
    raw = load("cloudwatch-alarm-state-change-gpu-idle.json")
    notice = only_notice(parse_notices(raw))
    assert (notice.instance_id, notice.node_name) == (INSTANCE, NODE)
    assert notice.event_id == f"{raw['id']}:{INSTANCE}"
    assert notice.detail["alarm_name"] == "gpuwarden-gpu-idle-ip-10-0-1-23"
    assert (notice.detail["state"], notice.detail["previous_state"]) == ("ALARM", "OK")
    assert notice.detail["threshold"] == 10.0
    assert notice.detail["reason"].startswith("Threshold Crossed")


def test_ok_alarm_state_is_ignored_as_the_deployed_rule_ignores_it() -> None:
    # Given the GPU-idle alarm going back to OK (the deployed rule takes ALARM only)
    batch = parse_notices(load("cloudwatch-alarm-state-change-ok.json"))
    # Then it is ignored, as a gpu-idle event, with the reason
    assert batch.notices == ()
    assert batch.kind is Kind.GPU_IDLE
    assert batch.ignored is not None
    assert "'OK'" in batch.ignored


def test_alarm_with_only_a_node_name_dimension_targets_the_node() -> None:
    raw = load("cloudwatch-alarm-state-change-gpu-idle.json")
    raw["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"] = {"NodeName": NODE}
    notice = only_notice(parse_notices(raw))
    assert (notice.instance_id, notice.node_name) == (None, NODE)


def test_alarm_without_instance_or_node_dimension_is_ignored_with_its_name() -> None:
    raw = load("cloudwatch-alarm-state-change-gpu-idle.json")
    raw["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"] = {"ClusterName": "ml-prod"}
    batch = parse_notices(raw)
    assert batch.notices == ()
    assert batch.ignored == "alarm gpuwarden-gpu-idle-ip-10-0-1-23 has no InstanceId or NodeName dimension"


def test_composite_alarm_has_no_metrics_and_is_ignored() -> None:
    raw = load("cloudwatch-alarm-state-change-gpu-idle.json")
    raw["detail"]["configuration"] = {"alarmRule": "ALARM(a) OR ALARM(b)"}
    assert parse_notices(raw).ignored is not None


def test_alarm_with_a_malformed_instance_dimension_names_the_dimension() -> None:
    raw = load("cloudwatch-alarm-state-change-gpu-idle.json")
    raw["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"]["InstanceId"] = "web-1"
    error = invalid(raw)
    loc = ["detail", "configuration", "metrics", 0, "metricStat", "metric", "dimensions", "InstanceId"]
    assert loc in error_locs(error)
    assert "InstanceId" in str(error)


def test_contributor_alarm_targets_the_contributor_and_keeps_its_id() -> None:
    raw = load("cloudwatch-alarm-contributor-state-change.json")
    notice = only_notice(parse_notices(raw))
    assert (notice.instance_id, notice.node_name) == (INSTANCE, NODE)
    assert notice.detail["contributor_id"] == "6d442278dba546f6"
    assert (notice.detail["alarm_name"], notice.detail["state"]) == ("gpuwarden-gpu-idle", "ALARM")


def test_alarm_events_under_the_aws_monitoring_source_are_accepted_too() -> None:
    raw = load("cloudwatch-alarm-state-change-gpu-idle.json")
    raw["source"] = "aws.monitoring"
    assert only_notice(parse_notices(raw)).source == "aws.monitoring"


def test_long_node_name_and_long_event_id_still_give_a_valid_idempotency_key() -> None:
    # Given a contributor named only by a 253-character node name, in an event with a long id
    raw = load("cloudwatch-alarm-contributor-state-change.json")
    raw["id"] = "e" * 128
    node = ".".join(["a" * 63] * 4)[:253]
    raw["detail"]["alarmContributor"]["attributes"] = {"NodeName": node}
    # When it is parsed, Then the key fits the Notice and still starts with the envelope id
    notice = only_notice(parse_notices(raw))
    assert notice.node_name == node
    assert notice.event_id.startswith(raw["id"] + ":")
    assert len(notice.event_id) <= 256


def test_contributor_without_instance_or_node_attribute_is_ignored() -> None:
    raw = load("cloudwatch-alarm-contributor-state-change.json")
    raw["detail"]["alarmContributor"]["attributes"] = {"TableName": "example-dynamodb-table-name"}
    batch = parse_notices(raw)
    assert batch.notices == ()
    assert batch.ignored is not None
    assert "6d442278dba546f6" in batch.ignored


# --- malformed EventBridge events -------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        (lambda e: e["detail"].pop("instance-id"), ["detail", "instance-id"]),
        (lambda e: e["detail"].update({"instance-id": 12345}), ["detail", "instance-id"]),
        (lambda e: e["detail"].update({"instance-id": "i-XYZ"}), ["detail", "instance-id"]),
        (lambda e: e.update({"detail": "not an object"}), ["detail", "instance-id"]),
        (lambda e: e.update({"time": "9999-12-31T23:59:59Z"}), ["time"]),  # deadline overflows
    ],
)
def test_spot_warning_naming_no_instance_is_rejected_naming_the_field(mutate: Any, loc: list[object]) -> None:
    # Given a spot warning that names no instance (nor one in `resources`)
    raw = load("spot-interruption.json")
    raw["resources"] = []
    mutate(raw)
    # When it is parsed, Then InvalidEvent names that place, in the message too
    error = invalid(raw)
    assert loc in error_locs(error)
    assert ".".join(map(str, loc)) in str(error)
    assert len(str(error)) < 2000  # a huge input is never echoed back


def test_unknown_detail_type_from_aws_ec2_is_rejected_naming_detail_type() -> None:
    raw = load("spot-interruption.json")
    raw["detail-type"] = "EC2 Instance-terminate Lifecycle Action"
    error = invalid(raw)
    assert error_locs(error) == [["detail-type"]]
    assert "EC2 Instance-terminate Lifecycle Action" in str(error)
    assert "EC2 Spot Instance Interruption Warning" in str(error)  # lists what is accepted


@pytest.mark.parametrize("raw", [None, 42, "spot", b"{}", [load("spot-interruption.json")], []])
def test_input_that_is_not_a_json_object_is_rejected(raw: object) -> None:
    error = invalid(raw)
    assert "JSON object" in str(error)


def test_an_object_of_no_known_shape_lists_the_accepted_shapes() -> None:
    error = invalid({"hello": "world"})
    assert "EventBridge event" in str(error)
    assert "budget-window" in str(error)
    assert "runbook" in str(error)


def test_event_bridge_only_entry_point_rejects_a_runbook_payload() -> None:
    with pytest.raises(InvalidEvent, match="detail-type"):
        parse_notices(load("runbook-drain.json"))


# --- Scheduler --------------------------------------------------------------------------------


def test_scheduler_window_open_sample_is_a_window_tick() -> None:
    tick = parse_event(load("scheduler-window-open.json"))
    assert isinstance(tick, SchedulerTick)
    assert (tick.action, tick.window, tick.attempt) == ("open", "night-cap", 1)
    assert tick.scheduled_time == datetime(2026, 6, 1, 22, 0, tzinfo=UTC)


def test_scheduler_keywords_left_unreplaced_read_as_not_given() -> None:
    tick = parse_event(
        {
            "gpuwarden": "budget-window",
            "action": "reconcile",
            "scheduled_time": "<aws.scheduler.scheduled-time>",
            "execution_id": "<aws.scheduler.execution-id>",
        }
    )
    assert isinstance(tick, SchedulerTick)
    assert (tick.scheduled_time, tick.execution_id) == (None, None)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"gpuwarden": "budget-window", "action": "open"}, "window"),
        ({"gpuwarden": "budget-window", "action": "maintenance-due"}, "plan_id"),
        ({"gpuwarden": "budget-window", "action": "explode"}, "action"),
        ({"gpuwarden": "something-else", "action": "reconcile"}, "gpuwarden"),
        ({"gpuwarden": "budget-window", "action": "reconcile", "windw": "x"}, "windw"),
    ],
)
def test_malformed_scheduler_input_names_the_field(raw: dict[str, Any], named: str) -> None:
    assert named in str(invalid(raw))


# --- runbook ----------------------------------------------------------------------------------


def test_runbook_samples_parse() -> None:
    drain = parse_event(load("runbook-drain.json"))
    plan = parse_event(load("runbook-plan.json"))
    assert isinstance(drain, RunbookRequest)
    assert isinstance(plan, RunbookRequest)
    assert (drain.action, drain.node, drain.instance_id, drain.dry_run) == ("drain", NODE, None, False)
    assert (plan.action, plan.node, plan.instance_id, plan.dry_run) == ("plan", None, INSTANCE, True)
    assert parse_runbook(load("runbook-drain.json")) == drain


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"action": "reboot"}, "action"),
        ({"instance_id": INSTANCE}, "instance_id"),  # both node and instance_id
        ({"node": None}, "instance_id"),  # neither
        ({"node": "Ip_10_0_1_23"}, "node"),
        ({"node": "-leading-dash"}, "node"),
        ({"node": "a" * 254}, "node"),
        ({"node": "ip-10-0-1-23."}, "node"),
        ({"force": "yes"}, "force"),
        ({"dry_run": 1}, "dry_run"),
        ({"reason": "x" * 1025}, "reason"),
        ({"nodes": "typo"}, "nodes"),
    ],
)
def test_malformed_runbook_request_names_the_field(changes: dict[str, Any], named: str) -> None:
    raw = {**load("runbook-drain.json"), **changes}
    with pytest.raises(InvalidEvent) as caught:
        parse_runbook(raw)
    assert named in str(caught.value)


@pytest.mark.parametrize("instance_id", ["i-0abc1234", "i-0abc1234def567890"])
def test_runbook_accepts_short_and_long_instance_ids(instance_id: str) -> None:
    request = parse_runbook({"action": "status", "instance_id": instance_id})
    assert request.instance_id == instance_id


@pytest.mark.parametrize("instance_id", ["i-0ABC1234", "i-0abc12345", "0abc1234", "i-0abc1234def56789"])
def test_runbook_rejects_malformed_instance_ids(instance_id: str) -> None:
    with pytest.raises(InvalidEvent, match="instance_id"):
        parse_runbook({"action": "status", "instance_id": instance_id})


# --- property: nothing but a result or InvalidEvent -------------------------------------------

SAMPLES = sorted(p.name for p in EVENTS.glob("*.json"))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=30)
    | st.sampled_from(["", INSTANCE, "2026-06-01T14:02:10Z", "Fri, 05 Jun 2026 05:00:00 GMT", "EC2"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found: list[tuple[object, ...]] = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@st.composite
def mutated_samples(draw: st.DrawFn) -> object:
    event: Any = copy.deepcopy(load(draw(st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(event)
        if not paths:
            break
        *parents, last = draw(st.sampled_from(paths))
        container = event
        for step in parents:
            container = container[step]
        if draw(st.booleans()) and isinstance(container, dict):
            del container[last]
        else:
            container[last] = draw(json_values)
    return event


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_samples())
def test_mutated_real_payloads_either_parse_or_raise_invalid_event(raw: object) -> None:
    rejected: InvalidEvent | None = None
    try:
        parsed = parse_event(raw)
    except InvalidEvent as error:
        rejected = error
    if rejected is not None:
        assert str(rejected)
        json.dumps(rejected.errors)  # what reaches the dead-letter queue and the CLI's stderr
        return
    assert isinstance(parsed, NoticeBatch | RunbookRequest | SchedulerTick | ScanTick | AlertBatch)
    if isinstance(parsed, AlertBatch):  # an Alertmanager notification (docs/gpu-signals.md)
        assert all(a.name and a.status in ("firing", "resolved") for a in parsed.alerts)
        assert all(a.starts_at is None or a.starts_at.tzinfo is not None for a in parsed.alerts)
    if isinstance(parsed, NoticeBatch):
        assert parsed.notices or parsed.ignored
        for notice in parsed.notices:
            assert notice.instance_id or notice.node_name or notice.capacity_reservation_id
            assert notice.deadline is None or notice.deadline.tzinfo is not None


def test_an_ignored_event_keeps_its_envelope_id_for_the_ledger() -> None:
    # Given a state change to `running` (well-formed, nothing to do)
    event = json.loads((EVENTS / "instance-state-change-stopping.json").read_text())
    event["detail"]["state"] = "running"
    # When it is parsed
    batch = parse_notices(event)
    # Then it is ignored with a reason and still names the event
    assert batch.notices == ()
    assert batch.ignored is not None
    assert batch.event_id == event["id"]


def test_dcgm_alarm_notice_carries_the_series_it_watches_for_the_recheck() -> None:
    # Given a user's single-metric alarm on the DCGM exporter's GPU utilisation
    notice = only_notice(parse_notices(load("cloudwatch-alarm-state-change-dcgm.json")))
    # Then the notice names the alarm's own series, and the re-check reads exactly that one
    metric = IdleMetric.for_alarm(notice.detail.get("metric"), "ml-prod", "i-0abc1234def567890", "n")
    assert (metric.namespace, metric.name) == ("ContainerInsights/Prometheus", "DCGM_FI_DEV_GPU_UTIL")
    assert dict(metric.dimensions)["InstanceId"] == "i-0abc1234def567890"


def test_alarm_without_a_gpu_series_is_rechecked_on_container_insights() -> None:
    # Given a gpu-idle notice that names no GPU series of its own (a Metrics Insights contributor)
    notice = only_notice(parse_notices(load("cloudwatch-alarm-contributor-state-change.json")))
    # Then the re-check reads Container Insights' per-node series
    metric = IdleMetric.for_alarm(notice.detail.get("metric"), "ml-prod", "i-1", "node-1")
    assert metric == IdleMetric.container_insights("ml-prod", "i-1", "node-1")
