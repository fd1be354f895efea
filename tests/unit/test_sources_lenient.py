"""Loss warnings are read leniently; the Capacity Reservation / Capacity Block kinds; the one
definition of the deployed rules' filters. Payloads from events/ (see events/README.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.kinds.inputs import parse_event, parse_notices
from gpuwarden.kinds.registry import KIND_OF, route_of_kind, rules, spec_of
from gpuwarden.sources import NoticeBatch
from gpuwarden.sources.lenient import with_aliases
from gpuwarden.sources.rules import matches, parse_prefixes, rule_for

EVENTS = Path(__file__).resolve().parents[2] / "events"
INSTANCE = "i-0abc1234def567890"
BLOCK = "cr-0a1b2c3d4e5f67890"
RECEIVED = datetime(2026, 6, 1, 14, 2, 30, tzinfo=UTC)


def load(name: str) -> dict[str, Any]:
    data = json.loads((EVENTS / name).read_text())
    assert isinstance(data, dict)
    return data


def one(batch: NoticeBatch) -> Notice:
    assert batch.ignored is None, batch.ignored
    (notice,) = batch.notices
    return notice


# --------------------------------------------------------------------------- Spot warnings are never dropped


@pytest.mark.parametrize("action", ["action", "reboot", "", None, 7, {"a": 1}])
def test_spot_warning_with_an_action_gpuwarden_does_not_know_is_a_terminate(action: object) -> None:
    # Given the AWS page's placeholder action, or anything else
    raw = load("spot-interruption.json")
    raw["detail"]["instance-action"] = action
    # Then it is a spot interruption with the two-minute deadline
    notice = one(parse_notices(raw))
    assert notice.kind is Kind.SPOT_INTERRUPTION
    assert notice.detail["instance_action"] == "terminate"
    assert notice.deadline == datetime(2026, 6, 1, 14, 4, 10, tzinfo=UTC)


@pytest.mark.parametrize("time", ["", "   ", "yesterday", "[Current time]", 12, None, "MISSING"])
def test_spot_warning_with_a_missing_empty_or_unreadable_time_uses_the_received_time(time: object) -> None:
    # Given aws-node-termination-handler's test warning with an empty time (and its variations)
    raw = load("spot-interruption-empty-time.json")
    if time == "MISSING":
        del raw["time"]
    else:
        raw["time"] = time
    # When it is parsed on receipt
    notice = one(parse_notices(raw, received=RECEIVED))
    # Then the deadline is two minutes after it was received
    assert notice.event_time == RECEIVED
    assert notice.deadline == RECEIVED + timedelta(seconds=120)
    assert notice.instance_id == INSTANCE


def test_spot_warning_time_without_a_zone_is_utc_and_nanoseconds_are_read() -> None:
    raw = load("spot-interruption-karpenter.json")  # Go's time.Now(): nanoseconds
    assert one(parse_notices(raw)).event_time == datetime(2026, 6, 1, 14, 2, 10, 123456, tzinfo=UTC)
    raw["time"] = "2026-06-01T14:02:10"
    assert one(parse_notices(raw)).event_time == datetime(2026, 6, 1, 14, 2, 10, tzinfo=UTC)


def test_spot_warning_without_an_id_gets_a_stable_derived_one() -> None:
    raw = load("spot-interruption.json")
    del raw["id"]
    first, again = one(parse_notices(raw)), one(parse_notices(dict(raw)))
    assert first.event_id.startswith("derived-")
    assert first.event_id == again.event_id  # a re-delivery is still a duplicate
    raw["id"] = "x" * 1_000_000
    assert one(parse_notices(raw)).event_id.startswith("derived-")


def test_spot_warning_with_odd_envelope_fields_and_unknown_fields_is_kept() -> None:
    raw = load("spot-interruption.json")
    raw.update({"version": 3, "account": {"no": 1}, "region": None, "resources": "not a list", "extra": [1, 2]})
    raw["detail"]["surprise"] = {"nested": True}
    notice = one(parse_notices(raw))
    assert (notice.instance_id, notice.account, notice.region) == (INSTANCE, None, None)


def test_spot_warning_naming_its_instance_only_in_resources_is_kept() -> None:
    raw = load("spot-interruption.json")
    del raw["detail"]["instance-id"]
    assert one(parse_notices(raw)).instance_id == INSTANCE


@pytest.mark.parametrize("detail", [{}, {"instance-id": "[instance-id]"}, {"instance-id": ""}, "x", None])
def test_spot_warning_naming_no_instance_is_rejected(detail: object) -> None:
    raw = load("spot-interruption.json")
    raw["resources"] = []
    raw["detail"] = detail
    with pytest.raises(InvalidEvent) as caught:
        parse_notices(raw)
    assert "instance-id" in str(caught.value)


# --------------------------------------------------------------------------- interruptible Capacity Reservations


def test_capacity_reservation_warning_deadline_is_the_instance_termination_time() -> None:
    # Given AWS's documented warning (its `resources` printed as a string)
    notice = one(parse_event(load("capacity-reservation-interruption.json")))  # type: ignore[arg-type]
    assert notice.kind is Kind.CAPACITY_RESERVATION_INTERRUPTION
    assert not spec_of(notice.kind).voluntary
    assert notice.instance_id == INSTANCE
    assert notice.deadline == datetime(2026, 6, 1, 14, 4, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    "sample",
    [
        "capacity-reservation-interruption-karpenter.json",
        "capacity-reservation-interruption-interruptible-spelling.json",
    ],
)
def test_capacity_reservation_warning_without_a_readable_termination_time_is_time_plus_two_minutes(
    sample: str,
) -> None:
    notice = one(parse_notices(load(sample)))
    assert notice.kind is Kind.CAPACITY_RESERVATION_INTERRUPTION
    assert notice.deadline == notice.event_time + timedelta(seconds=120)


# --------------------------------------------------------------------------- Capacity Blocks


@pytest.mark.parametrize(
    "sample", ["capacity-block-expiration-warning.json", "capacity-block-reservation-expiration-warning.json"]
)
def test_capacity_block_warning_as_printed_by_aws_names_the_block_with_a_ten_minute_deadline(sample: str) -> None:
    # Given the page's sample: detail_type, customer_event_id, no region, no version
    batch = parse_event(load(sample))
    assert isinstance(batch, NoticeBatch)
    notice = one(batch)
    assert route_of_kind(batch.kind) == "interruption"
    assert notice.kind is Kind.CAPACITY_BLOCK_EXPIRY
    assert (notice.capacity_reservation_id, notice.instance_id) == (BLOCK, None)
    assert notice.event_id == f"{BLOCK}-approaching-expiry"
    assert notice.deadline == datetime(2026, 6, 1, 11, 30, tzinfo=UTC)  # time + 10 min = end - 30 min


def test_capacity_block_warning_names_the_block_in_resources_only_and_has_no_time() -> None:
    raw = load("capacity-block-expiration-warning.json")
    del raw["detail"]["capacity-reservation-id"]
    del raw["time"]
    notice = one(parse_notices(raw, received=RECEIVED))
    assert notice.capacity_reservation_id == BLOCK
    assert notice.deadline == RECEIVED + timedelta(minutes=10)


def test_capacity_block_warning_naming_no_reservation_is_rejected() -> None:
    raw = load("capacity-block-expiration-warning.json")
    raw["resources"] = []
    raw["detail"] = {"end-date": "2026-06-01T12:00:00Z"}
    with pytest.raises(InvalidEvent) as caught:
        parse_notices(raw)
    assert "capacity-reservation-id" in str(caught.value)


@pytest.mark.parametrize("sample", ["capacity-block-delivered.json", "capacity-block-reservation-delivered.json"])
def test_capacity_block_delivery_is_a_plan_whose_deadline_is_when_termination_starts(sample: str) -> None:
    batch = parse_event(load(sample))
    assert isinstance(batch, NoticeBatch)
    notice = one(batch)
    assert route_of_kind(batch.kind) == "planning"
    assert notice.kind is Kind.CAPACITY_BLOCK_PLAN
    assert notice.capacity_reservation_id == BLOCK
    assert notice.deadline == datetime(2026, 6, 1, 11, 30, tzinfo=UTC)  # end - 30 min
    assert notice.detail["end_date"] == "2026-06-01T12:00:00+00:00"


def test_capacity_block_delivery_without_an_end_date_is_planned_from_ec2_later() -> None:
    raw = load("capacity-block-delivered.json")
    del raw["detail"]["end-date"]
    notice = one(parse_notices(raw))
    assert (notice.deadline, notice.detail["end_date"]) == (None, None)


# --------------------------------------------------------------------------- peers' scheduled changes


def test_karpenters_scheduled_change_without_a_start_time_is_drained_now() -> None:
    notice = one(parse_notices(load("health-scheduled-change-karpenter.json")))
    assert notice.kind is Kind.SCHEDULED_MAINTENANCE
    assert (notice.instance_id, notice.deadline) == (INSTANCE, None)


def test_node_termination_handlers_scheduled_change_names_the_instance() -> None:
    notice = one(parse_notices(load("health-scheduled-change-nth.json")))
    assert notice.instance_id == INSTANCE
    assert notice.deadline == datetime(2016, 6, 5, 15, 10, 9, tzinfo=UTC)


# --------------------------------------------------------------------------- the deployed filters


@pytest.mark.parametrize(
    "sample", ["cloudwatch-alarm-state-change-cpu.json", "cloudwatch-alarm-state-change-metric-math.json"]
)
def test_an_alarm_that_does_not_watch_gpu_utilisation_is_ignored_with_the_reason(sample: str) -> None:
    # Given AWS's own alarm samples (CPU, network metric math)
    batch = parse_notices(load(sample))
    # Then no deployed rule takes them: ignored as gpu-idle events, saying what they watch
    assert batch.notices == ()
    assert batch.kind is Kind.GPU_IDLE
    assert batch.ignored is not None
    assert "not a GPU-idle alarm" in batch.ignored
    assert "gpuwarden-gpu-idle" in batch.ignored


def test_a_configured_prefix_makes_any_alarm_a_gpu_idle_alarm() -> None:
    raw = load("cloudwatch-alarm-state-change-cpu.json")
    raw["detail"]["alarmName"] = "team-a-gpu-idle-1"
    raw["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"] = {"InstanceId": INSTANCE}
    assert parse_notices(raw).ignored is not None
    deployed = rules(parse_prefixes("team-a-gpu-idle"))
    assert one(parse_notices(raw, deployed=deployed)).kind is Kind.GPU_IDLE


@pytest.mark.parametrize(
    "sample", ["cloudwatch-alarm-state-change-dcgm.json", "cloudwatch-alarm-contributor-dcgm-metrics-insights.json"]
)
def test_dcgm_alarms_and_metrics_insights_queries_over_gpu_metrics_are_gpu_idle_whatever_their_name(
    sample: str,
) -> None:
    notice = one(parse_notices(load(sample)))
    assert notice.kind is Kind.GPU_IDLE
    assert notice.instance_id == INSTANCE


def test_an_event_from_the_wrong_source_matches_no_rule_and_is_ignored() -> None:
    raw = load("spot-interruption.json")
    raw["source"] = "aws.health"
    batch = parse_notices(raw)
    assert (batch.notices, batch.kind) == ((), Kind.SPOT_INTERRUPTION)
    assert batch.ignored is not None


def test_every_rule_pattern_matches_its_own_samples_and_every_detail_type_has_a_kind() -> None:
    deployed = rules()
    samples = [with_aliases(load(p.name)) for p in EVENTS.glob("*.json")]
    taken = {rule.name for event in samples if (rule := rule_for(event, deployed)) is not None}
    assert {r.name for r in deployed} == taken
    assert {t for r in deployed for t in r.detail_types} == set(KIND_OF)


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ({"a": ["x"]}, {"a": "x"}, True),
        ({"a": ["x"]}, {"a": "y"}, False),
        ({"a": ["x"]}, {}, False),
        ({"a": [{"prefix": "gpu"}]}, {"a": "gpu-idle"}, True),
        ({"a": [{"prefix": "gpu"}]}, {"a": 5}, False),
        ({"a": [{"wildcard": "*GPU*"}]}, {"a": "SELECT AVG(GPU) FROM x"}, True),
        ({"a": [{"wildcard": "*GPU*"}]}, {"a": "SELECT AVG(CPU)"}, False),
        ({"m": {"n": ["x"]}}, {"m": [{"n": "y"}, {"n": "x"}]}, True),  # arrays: any element
        ({"m": {"n": ["x"]}}, {"m": [{"n": "y"}]}, False),
        ({"$or": [{"a": ["1"]}, {"b": ["2"]}]}, {"b": "2"}, True),
        ({"$or": [{"a": ["1"]}, {"b": ["2"]}]}, {"b": "3"}, False),
        ({"a": [1]}, {"a": True}, False),
    ],
)
def test_the_pattern_matcher_follows_eventbridge(pattern: Any, value: Any, expected: bool) -> None:
    assert matches(pattern, value) is expected
