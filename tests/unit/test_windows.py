"""Budget windows: cron parsing and evaluation, DST, allowance, NodePool state, planning."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, ValidationError

from gpuwarden.domain.windows import (
    CronError,
    OpenWindow,
    Slot,
    Window,
    Windows,
    allowed_slots,
    desired_nodepool_state,
    latest_allowed_window_before,
    next_change,
    open_windows,
    parse_cron,
    parse_duration,
    validate_windows,
    voluntary_allowance,
    wall_to_instant,
)

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
SEOUL = ZoneInfo("Asia/Seoul")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def window(**fields: Any) -> Window:
    base: dict[str, Any] = {"name": "w", "schedule": "0 0 * * *", "duration": "1h", "max_disruptions": 1}
    return Window.model_validate(base | fields)


# The example policy of docs/policy.md.
FREEZE = window(
    name="business-hours-freeze",
    schedule="0 9 * * MON-FRI",
    timezone="Asia/Seoul",
    duration="10h",
    max_disruptions=0,
    nodepools=["gpu-training"],
)
NIGHT_CAP = window(
    name="night-cap", schedule="0 22 * * *", timezone="UTC", duration="8h", max_disruptions=2, gpu_limit=8
)
POLICY = [FREEZE, NIGHT_CAP]

MONDAY_10_SEOUL = utc(2026, 11, 23, 1)  # Monday 2026-11-23 10:00 KST


# ----------------------------------------------------------------------------- cron parsing


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("*/15 * * * *", "minutes", (0, 15, 30, 45)),
        ("1-30/5 * * * *", "minutes", (1, 6, 11, 16, 21, 26)),
        ("5/20 * * * *", "minutes", (5, 25, 45)),
        ("0 9,17 * * *", "hours", (9, 17)),
        ("0 22-23,0-2 * * *", "hours", (0, 1, 2, 22, 23)),
        ("0 0 1,15 * *", "days", (1, 15)),
        ("0 0 1 JAN,jul *", "months", (1, 7)),
        ("0 0 1 */3 *", "months", (1, 4, 7, 10)),
        ("0 0 1 MAR-MAY *", "months", (3, 4, 5)),
        ("0 9 * * MON-FRI", "weekdays", (1, 2, 3, 4, 5)),
        ("0 9 * * sat,SUN", "weekdays", (0, 6)),
        ("0 9 * * 7", "weekdays", (0,)),
        ("0 9 * * 5-7", "weekdays", (0, 5, 6)),
        ("0 9 * * 0-7", "weekdays", (0, 1, 2, 3, 4, 5, 6)),
        ("0 9 * * */2", "weekdays", (0, 2, 4, 6)),
        ("@hourly", "minutes", (0,)),
        ("@weekly", "weekdays", (0,)),
    ],
)
def test_given_cron_field_syntax_when_parsed_then_values_expand(
    text: str, field: str, expected: tuple[int, ...]
) -> None:
    # Given a schedule using one piece of cron syntax / When it is parsed
    schedule = parse_cron(text)
    # Then the field holds exactly the expected values
    assert getattr(schedule, field) == expected


def test_given_both_day_fields_restricted_when_matching_then_either_matches() -> None:
    # Given "on the 13th, and on Fridays" (standard cron ORs restricted day fields)
    schedule = parse_cron("0 0 13 * FRI")
    # Then a Tuesday 13th, a Friday 20th and a Friday 13th match; a Thursday 12th does not
    assert schedule.days_or_weekdays
    assert schedule.day_matches(date(2026, 10, 13))
    assert schedule.day_matches(date(2026, 11, 20))
    assert schedule.day_matches(date(2026, 11, 13))
    assert not schedule.day_matches(date(2026, 11, 12))


def test_given_a_day_field_starting_with_star_when_matching_then_both_must_match() -> None:
    # Given "odd days of the month that are Mondays": */2 starts with '*', so cron ANDs
    schedule = parse_cron("0 0 */2 * MON")
    # Then Monday 23rd matches, Monday 30th (even) and Wednesday 25th do not
    assert not schedule.days_or_weekdays
    assert schedule.day_matches(date(2026, 11, 23))
    assert not schedule.day_matches(date(2026, 11, 30))
    assert not schedule.day_matches(date(2026, 11, 25))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "0 9 * *",
            "invalid schedule '0 9 * *': expected 5 fields (minute hour day-of-month month day-of-week), got 4",
        ),
        ("0 9 * * * *", "expected 5 fields"),
        ("60 * * * *", "invalid schedule '60 * * * *': minute 60 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 1 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
        ("0 9 * * MOX", "day-of-week 'MOX' is not a number 0-7 or a name SUN-SAT"),
        ("0 0 1 JAM *", "month 'JAM' is not a number 1-12 or a name JAN-DEC"),
        ("0 MON * * *", "hour 'MON' is not a number 0-23"),
        ("*/0 * * * *", "minute step '0' is not a positive number"),
        ("*/x * * * *", "minute step 'x' is not a positive number"),
        ("0 9 * * FRI-MON", "day-of-week range 'FRI-MON' runs backwards (ranges do not wrap; use a list)"),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        ("-1 * * * *", "minute '' is not a number 0-59"),
        ("? * * * *", "minute '?' is not a number 0-59"),
        (
            "0 0 31 2 *",
            "invalid schedule '0 0 31 2 *': it never fires "
            "(no date matches its day-of-month, month and day-of-week fields)",
        ),
        ("0 0 30,31 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("@reboot", "expected 5 fields"),
    ],
)
def test_given_a_bad_cron_when_parsed_then_the_error_names_schedule_and_field(text: str, message: str) -> None:
    # When / Then
    with pytest.raises(CronError) as caught:
        parse_cron(text)
    assert message in str(caught.value)


def test_given_29_february_when_searching_then_the_next_leap_year_is_found() -> None:
    # Given a schedule that fires only on 29 February
    leap = window(schedule="0 0 29 2 *")
    # When asked for the next fire after March 2026 / Then it is 2028-02-29
    assert leap.next_fire(utc(2026, 3, 1)) == utc(2028, 2, 29)
    assert leap.prev_fire(utc(2026, 3, 1)) == utc(2024, 2, 29)


def test_given_a_utc_schedule_when_asked_then_prev_is_at_or_before_and_next_strictly_after() -> None:
    # Given every 15 minutes
    quarter = window(schedule="*/15 * * * *")
    # Then a fire time is its own previous fire, and the next one is 15 minutes later
    assert quarter.prev_fire(utc(2026, 1, 1, 10, 15)) == utc(2026, 1, 1, 10, 15)
    assert quarter.next_fire(utc(2026, 1, 1, 10, 15)) == utc(2026, 1, 1, 10, 30)
    assert quarter.prev_fire(utc(2026, 1, 1, 10, 29, 59)) == utc(2026, 1, 1, 10, 15)
    assert quarter.next_fire(utc(2026, 1, 1, 10, 14, 59, 999999)) == utc(2026, 1, 1, 10, 15)


# ------------------------------------------------------------------------- window fields


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10h", timedelta(hours=10)),
        ("30m", timedelta(minutes=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("7d", timedelta(days=7)),
        (" 8H ", timedelta(hours=8)),
    ],
)
def test_given_a_duration_text_when_parsed_then_it_is_elapsed_time(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert window(duration=text).duration == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0h", "invalid duration '0h': a window must last longer than zero"),
        ("8d", "invalid duration '8d': a window lasts at most 7 days"),
        ("169h", "at most 7 days"),
        ("10 hours", "invalid duration '10 hours': expected a number with units d, h, m, s"),
        ("30m1h", "expected a number with units d, h, m, s in that order"),
        ("", "expected a number with units"),
        ("PT10H", "expected a number with units"),
        (36000, "invalid duration 36000: expected a string such as '10h'"),
        (timedelta(0), "must last longer than zero"),
    ],
)
def test_given_a_bad_duration_when_validated_then_the_error_says_why(value: object, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        window(duration=value)
    assert message in str(caught.value)


def test_given_a_window_when_dumped_as_json_then_it_validates_again_unchanged() -> None:
    # Given / When
    dumped = FREEZE.model_dump(mode="json")
    # Then the duration keeps the policy's own notation and the round trip is exact
    assert dumped["duration"] == "10h"
    assert Window.model_validate(dumped) == FREEZE
    assert window(duration=timedelta(hours=1, minutes=30, seconds=5)).model_dump()["duration"] == "1h30m5s"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timezone": "Asia/Seol"}, "unknown time zone 'Asia/Seol': expected an IANA name"),
        ({"timezone": "../etc/passwd"}, "unknown time zone '../etc/passwd'"),
        ({"timezone": ""}, "unknown time zone ''"),
        ({"name": ""}, "invalid window name ''"),
        ({"name": "night cap"}, "invalid window name 'night cap'"),
        ({"schedule": "0 9 * * MOX"}, "invalid schedule '0 9 * * MOX'"),
        ({"max_disruptions": -1}, "greater than or equal to 0"),
        ({"gpu_limit": -1}, "greater than or equal to 0"),
        ({"nodepools": []}, "nodepools must name at least one NodePool"),
        ({"nodepools": [""]}, "nodepools must name at least one NodePool"),
        ({"colour": "red"}, "Extra inputs are not permitted"),
    ],
)
def test_given_a_bad_window_field_when_validated_then_the_error_names_it(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        window(**fields)
    assert message in str(caught.value)


def test_given_repeated_window_names_when_the_list_is_validated_then_they_are_named() -> None:
    # Given two windows named alike
    twins = [window(name="night-cap"), window(name="other"), window(name="night-cap")]
    # When / Then the helper refuses, naming the repeated name
    with pytest.raises(ValueError, match="window names must be unique; repeated: 'night-cap'"):
        validate_windows(twins)
    assert validate_windows(POLICY) == POLICY

    # And a model using the Windows type refuses it too
    class Holder(BaseModel):
        windows: Windows

    with pytest.raises(ValidationError, match="repeated: 'night-cap'"):
        Holder.model_validate({"windows": [twin.model_dump() for twin in twins]})


def test_given_windows_when_hashed_then_equal_windows_hash_alike() -> None:
    assert hash(window(nodepools=["a"])) == hash(window(nodepools=["a"]))
    assert len({FREEZE, NIGHT_CAP, FREEZE}) == 2


# ----------------------------------------------------------------------------- allowance


def test_given_no_windows_when_asked_then_unlimited() -> None:
    allowance = voluntary_allowance([], MONDAY_10_SEOUL, "gpu-training", 5)
    assert allowance.allowed is None
    assert allowance.window is None
    assert allowance.reason == "no budget windows configured"


def test_given_seoul_business_hours_freeze_when_monday_10_local_then_refused_with_the_window_name() -> None:
    # Given the contract's policy / When a gpu-training node is asked about at 10:00 KST Monday
    allowance = voluntary_allowance(POLICY, MONDAY_10_SEOUL, "gpu-training", 0)
    # Then the freeze wins over the also-open night-cap, and says so
    assert allowance.allowed == 0
    assert allowance.window == "business-hours-freeze"
    assert allowance.reason == (
        "window 'business-hours-freeze' (Asia/Seoul, open until 2026-11-23T19:00:00+09:00) freezes voluntary disruption"
    )


def test_given_seoul_freeze_when_saturday_10_local_then_not_frozen() -> None:
    saturday = utc(2026, 11, 28, 1)
    allowance = voluntary_allowance([FREEZE], saturday, "gpu-training", 0)
    assert allowance.allowed is None
    assert allowance.reason == "no window open for nodepool 'gpu-training'"


def test_given_night_cap_of_two_with_one_in_progress_when_asked_then_one_more() -> None:
    # Given the night-cap is open at 23:00 UTC and one disruption is under way
    allowance = voluntary_allowance(POLICY, utc(2026, 11, 23, 23), "gpu-training", 1)
    # Then one more is allowed
    assert allowance.allowed == 1
    assert allowance.window == "night-cap"
    assert allowance.reason.startswith("window 'night-cap' allows 2, 1 in progress: 1 more")
    assert "(UTC, open until 2026-11-24T06:00:00+00:00)" in allowance.reason


def test_given_more_in_progress_than_the_cap_when_asked_then_zero_not_negative() -> None:
    allowance = voluntary_allowance([NIGHT_CAP], utc(2026, 11, 23, 23), None, 5)
    assert allowance.allowed == 0
    assert "allows 2, 5 in progress: 0 more" in allowance.reason


def test_given_a_nodepool_filter_when_asked_for_other_pools_then_the_window_does_not_apply() -> None:
    # Given only the gpu-training freeze is open (16:00 KST, the night-cap is closed)
    afternoon_seoul = utc(2026, 11, 23, 7)
    # Then inference and nodes outside Karpenter are not limited
    assert voluntary_allowance(POLICY, afternoon_seoul, "inference", 0).allowed is None
    outside = voluntary_allowance(POLICY, afternoon_seoul, None, 0)
    assert outside.allowed is None
    assert outside.reason == "no window open for nodes outside Karpenter"
    # And a node outside Karpenter is still covered by windows without a filter
    assert voluntary_allowance(POLICY, MONDAY_10_SEOUL, None, 0).window == "night-cap"


def test_given_overlapping_caps_when_both_open_then_the_smallest_wins_and_ties_go_to_the_first_listed() -> None:
    # Given three overlapping always-open-at-noon windows
    wide = window(name="wide", schedule="0 11 * * *", duration="2h", max_disruptions=3)
    narrow = window(name="narrow", schedule="30 11 * * *", duration="2h", max_disruptions=1)
    narrow_too = window(name="narrow-too", schedule="0 12 * * *", duration="2h", max_disruptions=1)
    noon = utc(2026, 5, 5, 12, 15)
    # When / Then the smallest cap wins, the earliest-listed on a tie
    assert voluntary_allowance([wide, narrow, narrow_too], noon, "p", 0).window == "narrow"
    assert voluntary_allowance([wide, narrow_too, narrow], noon, "p", 0).window == "narrow-too"
    assert [o.name for o in open_windows([wide, narrow, narrow_too], noon, "p")] == ["wide", "narrow", "narrow-too"]


def test_given_negative_in_progress_or_naive_now_when_asked_then_refused() -> None:
    with pytest.raises(ValueError, match="in_progress must be >= 0"):
        voluntary_allowance(POLICY, MONDAY_10_SEOUL, None, -1)
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        voluntary_allowance(POLICY, datetime(2026, 11, 23, 1), None, 0)


# ---------------------------------------------------------------- midnight and weekends


def test_given_a_window_spanning_midnight_when_asked_then_open_until_morning() -> None:
    # Given the night-cap 22:00-06:00 UTC
    # Then it is open at 23:59 and 05:59 the next day, closed at 06:00 and 21:59
    assert open_windows([NIGHT_CAP], utc(2026, 11, 23, 23, 59))
    (occurrence,) = open_windows([NIGHT_CAP], utc(2026, 11, 24, 5, 59, 59))
    assert occurrence.opened_at == utc(2026, 11, 23, 22)
    assert occurrence.closes_at == utc(2026, 11, 24, 6)
    assert not open_windows([NIGHT_CAP], utc(2026, 11, 24, 6))
    assert not open_windows([NIGHT_CAP], utc(2026, 11, 24, 21, 59))


def test_given_a_weekend_window_when_asked_then_open_from_friday_evening_to_monday_morning() -> None:
    # Given a window opening Friday 18:00 Berlin time for 60 hours
    weekend = window(name="weekend", schedule="0 18 * * FRI", timezone="Europe/Berlin", duration="60h")
    friday = datetime(2026, 11, 27, 18, tzinfo=BERLIN)
    # Then it is open all weekend and closes Monday 06:00 local
    for hours in (0, 12, 30, 59):
        assert weekend.occurrence_at(friday + timedelta(hours=hours)) is not None
    assert weekend.occurrence_at(friday - timedelta(seconds=1)) is None
    assert weekend.occurrence_at(datetime(2026, 11, 30, 6, tzinfo=BERLIN)) is None
    occurrence = weekend.occurrence_at(datetime(2026, 11, 29, 12, tzinfo=BERLIN))
    assert occurrence is not None
    assert occurrence.local_closes_at.isoformat() == "2026-11-30T06:00:00+01:00"


# ---------------------------------------------------------------------------------- DST


def test_given_new_york_spring_forward_when_0230_does_not_exist_then_it_fires_at_0300_edt() -> None:
    # Given 02:30 every night in New York; 2026-03-08 02:00 EST jumps to 03:00 EDT
    nightly = window(schedule="30 2 * * *", timezone="America/New_York")
    # When stepping through the fire times
    fires = [nightly.next_fire(utc(2026, 3, 7))]
    for _ in range(2):
        fires.append(nightly.next_fire(fires[-1]))
    # Then the skipped 02:30 fires at the first instant after the gap
    assert [fire.astimezone(NEW_YORK).isoformat() for fire in fires] == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    assert nightly.prev_fire(utc(2026, 3, 8, 7, 30)) == utc(2026, 3, 8, 7)


def test_given_new_york_fall_back_when_0130_happens_twice_then_it_fires_once_at_the_first() -> None:
    # Given 01:30 every night; 2026-11-01 02:00 EDT falls back to 01:00 EST
    nightly = window(schedule="30 1 * * *", timezone="America/New_York", duration="10m")
    # Then it fires at 01:30 EDT (05:30 UTC) and not at 01:30 EST (06:30 UTC)
    assert nightly.next_fire(utc(2026, 11, 1)) == utc(2026, 11, 1, 5, 30)
    assert nightly.next_fire(utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 2, 6, 30)
    # And during the repeated 01:35 EST its latest fire is still the first 01:30
    second_pass = utc(2026, 11, 1, 6, 35)
    assert second_pass.astimezone(NEW_YORK).isoformat() == "2026-11-01T01:35:00-05:00"
    assert nightly.prev_fire(second_pass) == utc(2026, 11, 1, 5, 30)
    assert nightly.occurrence_at(second_pass) is None
    assert nightly.occurrence_at(utc(2026, 11, 1, 5, 35)) is not None


def test_given_new_york_windows_across_dst_when_open_then_duration_is_elapsed_time() -> None:
    # Given an 8h window opening at 22:00 New York time
    night = window(schedule="0 22 * * *", timezone="America/New_York", duration="8h")
    # When it spans the spring-forward night / Then it closes 8 real hours later, 07:00 EDT
    spring = night.occurrence_at(utc(2026, 3, 8, 4))
    assert spring is not None
    assert spring.local_opened_at.isoformat() == "2026-03-07T22:00:00-05:00"
    assert spring.local_closes_at.isoformat() == "2026-03-08T07:00:00-04:00"
    assert spring.closes_at - spring.opened_at == timedelta(hours=8)
    # And across the fall-back night it closes at 05:00 EST
    autumn = night.occurrence_at(utc(2026, 11, 1, 4))
    assert autumn is not None
    assert autumn.local_closes_at.isoformat() == "2026-11-01T05:00:00-05:00"
    assert night.occurrence_at(utc(2026, 11, 1, 10)) is None


def test_given_a_10h_berlin_window_opening_at_0900_across_dst_then_it_closes_10_real_hours_later() -> None:
    # Given a 10h window opening 21:00 the evening before each change
    evening = window(schedule="0 21 * * *", timezone="Europe/Berlin", duration="10h")
    # Then across spring-forward it closes 08:00 CEST (not 07:00), across fall-back 06:00 CET
    spring = evening.occurrence_at(utc(2026, 3, 29, 3))
    autumn = evening.occurrence_at(utc(2026, 10, 25, 3))
    assert spring is not None
    assert autumn is not None
    assert spring.local_closes_at.isoformat() == "2026-03-29T08:00:00+02:00"
    assert autumn.local_closes_at.isoformat() == "2026-10-25T06:00:00+01:00"


def test_given_hourly_berlin_schedule_when_stepping_through_spring_forward_then_the_gap_collapses() -> None:
    # Given hourly and every 30 minutes; 2026-03-29 02:00 CET jumps to 03:00 CEST (01:00 UTC)
    hourly = window(schedule="0 * * * *", timezone="Europe/Berlin")
    half = window(schedule="*/30 * * * *", timezone="Europe/Berlin")
    # Then 02:00 (missing) and 03:00 both fire at 01:00 UTC: one fire, not two
    assert hourly.next_fire(utc(2026, 3, 29, 0)) == utc(2026, 3, 29, 1)
    assert hourly.next_fire(utc(2026, 3, 29, 1)) == utc(2026, 3, 29, 2)
    assert half.next_fire(utc(2026, 3, 29, 0, 30)) == utc(2026, 3, 29, 1)
    assert half.next_fire(utc(2026, 3, 29, 1)) == utc(2026, 3, 29, 1, 30)
    assert half.prev_fire(utc(2026, 3, 29, 1, 29)) == utc(2026, 3, 29, 1)


def test_given_hourly_berlin_schedule_when_stepping_through_fall_back_then_the_repeat_does_not_fire() -> None:
    # Given hourly; 2026-10-25 03:00 CEST falls back to 02:00 CET (at 01:00 UTC)
    hourly = window(schedule="0 * * * *", timezone="Europe/Berlin")
    fires = [hourly.next_fire(utc(2026, 10, 24, 23, 30))]
    for _ in range(3):
        fires.append(hourly.next_fire(fires[-1]))
    # Then 02:00 fires once (CEST, 00:00 UTC) and the next fire is 03:00 CET (02:00 UTC)
    assert fires == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 2), utc(2026, 10, 25, 3), utc(2026, 10, 25, 4)]
    assert [fire.astimezone(BERLIN).strftime("%H:%M%z") for fire in fires] == [
        "02:00+0200",
        "03:00+0100",
        "04:00+0100",
        "05:00+0100",
    ]
    # And at 02:30 CET (the repeat) the latest fire is 02:00 CEST
    assert hourly.prev_fire(utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 25, 0)


def test_given_berlin_0230_schedule_when_dst_changes_then_the_documented_rules_hold() -> None:
    nightly = window(schedule="30 2 * * *", timezone="Europe/Berlin")
    # Spring-forward: 02:30 does not exist, fires at 03:00 CEST (01:00 UTC)
    assert nightly.next_fire(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1)
    # Fall-back: 02:30 happens twice, fires at the first (CEST, 00:30 UTC) only
    assert nightly.next_fire(utc(2026, 10, 24, 12)) == utc(2026, 10, 25, 0, 30)
    assert nightly.next_fire(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)


def test_given_wall_times_when_mapped_to_instants_then_gap_goes_forward_and_overlap_to_first() -> None:
    assert wall_to_instant(datetime(2026, 3, 8, 2, 30), NEW_YORK) == utc(2026, 3, 8, 7)
    assert wall_to_instant(datetime(2026, 11, 1, 1, 30), NEW_YORK) == utc(2026, 11, 1, 5, 30)
    assert wall_to_instant(datetime(2026, 7, 1, 12), SEOUL) == utc(2026, 7, 1, 3)
    # Samoa skipped 2011-12-30 entirely: any time that day maps to its first instant after
    apia = ZoneInfo("Pacific/Apia")
    assert wall_to_instant(datetime(2011, 12, 30, 12), apia) == utc(2011, 12, 30, 10)


# ------------------------------------------------------------------------- next change


def test_given_the_policy_when_asked_for_the_next_change_then_it_is_the_next_open_or_close() -> None:
    # Given both windows open at 10:00 KST Monday: night-cap closes at 06:00 UTC first
    assert next_change(POLICY, MONDAY_10_SEOUL) == utc(2026, 11, 23, 6)
    # Then the freeze closes at 10:00 UTC, then the night-cap opens at 22:00 UTC
    assert next_change(POLICY, utc(2026, 11, 23, 6)) == utc(2026, 11, 23, 10)
    assert next_change(POLICY, utc(2026, 11, 23, 10)) == utc(2026, 11, 23, 22)
    # And with no windows there is no change
    assert next_change([], MONDAY_10_SEOUL) is None


# -------------------------------------------------------------------- NodePool state


def test_given_freeze_and_cap_open_when_the_pool_state_is_computed_then_budget_zero_and_gpu_cap() -> None:
    desired = desired_nodepool_state(POLICY, MONDAY_10_SEOUL, "gpu-training")
    assert desired.budgets == [{"nodes": "0"}]
    assert desired.gpu_limit == 8
    assert desired.windows == ("business-hours-freeze", "night-cap")


def test_given_only_the_cap_open_when_the_pool_state_is_computed_then_budget_is_the_cap() -> None:
    desired = desired_nodepool_state(POLICY, MONDAY_10_SEOUL, "inference")
    assert desired.budgets == [{"nodes": "2"}]
    assert desired.gpu_limit == 8
    assert desired.windows == ("night-cap",)


def test_given_no_window_open_when_the_pool_state_is_computed_then_restore_originals() -> None:
    desired = desired_nodepool_state(POLICY, utc(2026, 11, 28, 12), "gpu-training")
    assert desired.budgets is None
    assert desired.gpu_limit is None
    assert desired.windows == ()


def test_given_open_windows_without_gpu_limit_then_the_gpu_limit_is_restored() -> None:
    desired = desired_nodepool_state([FREEZE], MONDAY_10_SEOUL, "gpu-training")
    assert desired.budgets == [{"nodes": "0"}]
    assert desired.gpu_limit is None


# ---------------------------------------------------------------- maintenance planning


def test_given_a_weekday_freeze_when_listing_allowed_slots_then_freeze_hours_are_cut_out() -> None:
    # Given the policy from Monday 01:00 UTC to Wednesday 01:00 UTC
    slots = allowed_slots(POLICY, MONDAY_10_SEOUL, utc(2026, 11, 25, 1), "gpu-training")
    # Then disruption is allowed outside 00:00-10:00 UTC (09:00-19:00 KST) only
    assert slots == [
        Slot(utc(2026, 11, 23, 10), utc(2026, 11, 24, 0)),
        Slot(utc(2026, 11, 24, 10), utc(2026, 11, 25, 0)),
    ]
    # And a pool the freeze does not cover may be disrupted at any time (caps limit how many)
    assert allowed_slots(POLICY, MONDAY_10_SEOUL, utc(2026, 11, 25, 1), "inference") == [
        Slot(MONDAY_10_SEOUL, utc(2026, 11, 25, 1))
    ]
    assert allowed_slots(POLICY, MONDAY_10_SEOUL, MONDAY_10_SEOUL, "inference") == []


def test_given_a_self_overlapping_freeze_when_listing_slots_then_occurrences_merge() -> None:
    # Given a freeze firing every hour for 90 minutes, from 10:00 to 14:00 (closing 15:30)
    rolling = window(name="rolling", schedule="0 10-14 * * *", duration="90m", max_disruptions=0)
    slots = allowed_slots([rolling], utc(2026, 1, 1, 10, 45), utc(2026, 1, 2, 0), "p")
    assert slots == [Slot(utc(2026, 1, 1, 15, 30), utc(2026, 1, 2, 0))]


def test_given_no_freeze_when_planning_then_the_window_straddling_the_deadline_counts_for_its_part_before_it() -> None:
    # Given maintenance on Thursday 01:00 UTC for an inference node, needing 2h
    plan = latest_allowed_window_before(POLICY, MONDAY_10_SEOUL, utc(2026, 11, 26, 1), "inference", timedelta(hours=2))
    # Then Wednesday's night-cap (22:00-06:00), which has 3h before the deadline
    assert plan is not None
    assert plan.name == "night-cap"
    assert (plan.opened_at, plan.closes_at) == (utc(2026, 11, 25, 22), utc(2026, 11, 26, 6))
    assert plan.usable == Slot(utc(2026, 11, 25, 22), utc(2026, 11, 26, 1))
    # When 4h are needed, Then its 3h before the deadline are too few: Tuesday's whole night-cap
    longer = latest_allowed_window_before(
        POLICY, MONDAY_10_SEOUL, utc(2026, 11, 26, 1), "inference", timedelta(hours=4)
    )
    assert longer is not None
    assert (longer.opened_at, longer.closes_at) == (utc(2026, 11, 24, 22), utc(2026, 11, 25, 6))
    assert longer.usable == Slot(utc(2026, 11, 24, 22), utc(2026, 11, 25, 6))


def test_given_a_22_to_06_window_when_maintenance_is_at_02_then_the_night_before_serves_it() -> None:
    # Given a 22:00-06:00 window and a 02:00 maintenance, with a 1h drain allowance, at noon the day before
    night = window(name="night", schedule="0 22 * * *", duration="8h", max_disruptions=1)
    plan = latest_allowed_window_before([night], utc(2026, 6, 1, 12), utc(2026, 6, 2, 2), "p", timedelta(hours=1))
    # Then the drain is planned from 22:00: the window's four hours before the maintenance
    assert plan is not None
    assert plan.usable == Slot(utc(2026, 6, 1, 22), utc(2026, 6, 2, 2))


def test_given_a_freeze_overlapping_the_cap_when_planning_then_only_the_unfrozen_part_is_usable() -> None:
    # Given gpu-training: the night-cap overlaps the weekday freeze from 00:00 UTC
    deadline = utc(2026, 11, 30, 12)  # Monday noon
    # When 1h is needed / Then Sunday night's cap, usable until Monday's freeze starts
    short = latest_allowed_window_before(POLICY, MONDAY_10_SEOUL, deadline, "gpu-training", timedelta(hours=1))
    assert short is not None
    assert short.opened_at == utc(2026, 11, 29, 22)
    assert short.usable == Slot(utc(2026, 11, 29, 22), utc(2026, 11, 30, 0))
    # When 3h are needed / Then Saturday night's, which no freeze touches
    long = latest_allowed_window_before(POLICY, MONDAY_10_SEOUL, deadline, "gpu-training", timedelta(hours=3))
    assert long is not None
    assert long.opened_at == utc(2026, 11, 28, 22)
    assert long.usable == Slot(utc(2026, 11, 28, 22), utc(2026, 11, 29, 6))
    # When 9h are needed / Then no window is long enough
    assert latest_allowed_window_before(POLICY, MONDAY_10_SEOUL, deadline, "gpu-training", timedelta(hours=9)) is None


def test_given_a_window_open_now_when_planning_then_it_counts_with_the_time_it_has_left() -> None:
    now = utc(2026, 11, 24, 23)  # the Tuesday night-cap has 7h left
    deadline = utc(2026, 11, 25, 7)
    plan = latest_allowed_window_before(POLICY, now, deadline, "inference", timedelta(hours=7))
    assert plan is not None
    assert plan.usable == Slot(now, utc(2026, 11, 25, 6))
    assert latest_allowed_window_before(POLICY, now, deadline, "inference", timedelta(hours=7, seconds=1)) is None
    assert latest_allowed_window_before(POLICY, now, now, "inference", timedelta(hours=1)) is None
    with pytest.raises(ValueError, match="needed must be a positive duration"):
        latest_allowed_window_before(POLICY, now, deadline, "inference", timedelta())


def test_given_only_freezes_when_planning_then_there_is_no_window() -> None:
    assert (
        latest_allowed_window_before([FREEZE], MONDAY_10_SEOUL, utc(2026, 12, 1), "gpu-training", timedelta(hours=1))
        is None
    )


def test_given_an_open_window_when_described_then_local_times_and_zone_show() -> None:
    occurrence = OpenWindow(window=FREEZE, opened_at=utc(2026, 11, 23, 0), closes_at=utc(2026, 11, 23, 10))
    assert occurrence.describe() == "(Asia/Seoul, open until 2026-11-23T19:00:00+09:00)"
    assert occurrence.local_opened_at.isoformat() == "2026-11-23T09:00:00+09:00"
    assert occurrence.is_open(MONDAY_10_SEOUL)
    assert not occurrence.is_open(utc(2026, 11, 23, 10))
