"""Budget windows: properties checked against a brute-force, minute-by-minute oracle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuwarden.domain.windows import (
    CronError,
    CronSchedule,
    Window,
    allowed_slots,
    latest_allowed_window_before,
    next_change,
    open_windows,
    parse_cron,
    voluntary_allowance,
)

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Seoul",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "America/St_Johns",  # -03:30, DST
    "Asia/Kolkata",  # +05:30, no DST
    "Europe/Dublin",  # "negative DST" in tzdata
    "Pacific/Apia",  # skipped 2011-12-30 entirely
]
MINUTE = timedelta(minutes=1)
RANGE = timedelta(days=2)
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _transitions(zone: ZoneInfo, year: int) -> list[datetime]:
    """The UTC hours at which ``zone`` changes its offset during ``year`` (to the hour)."""
    found = []
    instant = datetime(year, 1, 1, tzinfo=UTC)
    offset = instant.astimezone(zone).utcoffset()
    while instant.year == year:
        instant += timedelta(hours=1)
        current = instant.astimezone(zone).utcoffset()
        if current != offset:
            found.append(instant)
            offset = current
    return found


TRANSITIONS = sorted(
    {t for name in ZONES for t in _transitions(ZoneInfo(name), 2026)}
    | set(_transitions(ZoneInfo("Pacific/Apia"), 2011))
)


def _values(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        st.integers(1, high - low + 1).map(lambda step: f"*/{step}"),
        st.lists(number, min_size=1, max_size=3).map(lambda values: ",".join(map(str, values))),
        st.tuples(number, number, st.integers(1, 5)).map(lambda t: f"{min(t[0], t[1])}-{max(t[0], t[1])}/{t[2]}"),
    )


def _mostly_any(low: int, high: int) -> st.SearchStrategy[str]:
    return st.one_of(st.just("*"), st.just("*"), st.just("*"), _values(low, high))


@st.composite
def crons(draw: st.DrawFn) -> str:
    text = " ".join(
        (
            draw(_values(0, 59)),
            draw(_values(0, 23)),
            draw(_mostly_any(1, 31)),
            draw(_mostly_any(1, 12)),
            draw(st.one_of(st.just("*"), st.just("MON-FRI"), st.just("sat,sun"), _values(0, 7))),
        )
    )
    try:
        parse_cron(text)
    except CronError:
        assume(False)
    return text


instants = st.one_of(
    st.datetimes(datetime(1995, 1, 1), datetime(2045, 1, 1), timezones=st.just(UTC)),
    st.tuples(st.sampled_from(TRANSITIONS), st.integers(-4 * 3600, 4 * 3600)).map(
        lambda t: t[0] + timedelta(seconds=t[1])
    ),
)


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def oracle_fires(schedule: CronSchedule, zone: ZoneInfo, low: datetime, high: datetime) -> list[datetime]:
    """Fire instants in [low, high], stepping minute by minute through real (UTC) time.

    A UTC minute ``u`` fires iff some matching wall minute lies in (the furthest wall time
    reached before ``u``, wall(u)]: the first instant whose wall clock reaches a fire time.
    """
    instant = low.replace(second=0, microsecond=0) - timedelta(hours=26)
    reached = _wall(instant, zone)
    fires = []
    while instant <= high:
        instant += MINUTE
        wall = _wall(instant, zone)
        if wall <= reached:
            continue  # a repeated (fall-back) wall time
        candidate = reached + MINUTE
        while candidate <= wall and not schedule.matches(candidate):
            candidate += MINUTE
        if candidate <= wall and low <= instant <= high:
            fires.append(instant)
        reached = wall
    return fires


@settings(SETTINGS, max_examples=120)
@given(cron=crons(), zone_name=st.sampled_from(ZONES), at=instants)
def test_prev_and_next_fire_agree_with_a_minute_by_minute_oracle(cron: str, zone_name: str, at: datetime) -> None:
    # Given a schedule, a zone and an instant
    window = Window(name="w", schedule=cron, timezone=zone_name, duration=MINUTE, max_disruptions=0)
    fires = oracle_fires(window.cron, window.zone, at - RANGE, at + RANGE)
    # When / Then prev ≤ at < next, both are fire times, and nothing fires in between
    before = [fire for fire in fires if fire <= at]
    after = [fire for fire in fires if fire > at]
    previous = window.prev_fire(at)
    following = window.next_fire(at)
    if before:
        assert previous == before[-1]
    else:
        assert previous is None or previous < at - RANGE
    if after:
        assert following == after[0]
    else:
        assert following > at + RANGE


@st.composite
def policies(draw: st.DrawFn) -> list[Window]:
    count = draw(st.integers(1, 3))
    return [
        Window(
            name=f"w{index}",
            schedule=draw(crons()),
            timezone=draw(st.sampled_from(ZONES)),
            duration=timedelta(minutes=draw(st.integers(1, 7 * 24 * 60))),
            max_disruptions=draw(st.integers(0, 3)),
            nodepools=draw(st.sampled_from([None, ["a"], ["b"], ["a", "b"]])),
            gpu_limit=draw(st.none() | st.integers(0, 16)),
        )
        for index in range(count)
    ]


pools = st.sampled_from([None, "a", "b"])


@settings(SETTINGS, max_examples=80)
@given(windows=policies(), now=instants, nodepool=pools, in_progress=st.integers(0, 5))
def test_allowance_is_never_negative_nor_above_an_open_windows_cap(
    windows: list[Window], now: datetime, nodepool: str | None, in_progress: int
) -> None:
    # When
    opened = open_windows(windows, now, nodepool)
    allowance = voluntary_allowance(windows, now, nodepool, in_progress)
    # Then every occurrence holds now and started at a fire time of its window
    for occurrence in opened:
        assert occurrence.opened_at <= now < occurrence.closes_at
        assert occurrence.closes_at - occurrence.opened_at == occurrence.window.duration
        assert occurrence.window.prev_fire(now) == occurrence.opened_at
        assert occurrence.window.next_fire(occurrence.opened_at - timedelta(microseconds=1)) == occurrence.opened_at
    # And the allowance is the most restrictive cap minus what is under way, never below zero
    if not opened:
        assert allowance.allowed is None
    else:
        cap = min(occurrence.window.max_disruptions for occurrence in opened)
        assert allowance.allowed == max(0, cap - in_progress)
        assert 0 <= allowance.allowed <= cap
        assert allowance.window in {occurrence.name for occurrence in opened}


@settings(SETTINGS, max_examples=60)
@given(windows=policies(), now=instants)
def test_nothing_opens_or_closes_before_the_next_change(windows: list[Window], now: datetime) -> None:
    change = next_change(windows, now)
    assert change is not None
    assert change > now
    just_before = change - timedelta(microseconds=1)
    assert [w.occurrence_at(now) for w in windows] == [w.occurrence_at(just_before) for w in windows]


@settings(SETTINGS, max_examples=60)
@given(
    windows=policies(),
    start=instants,
    span_minutes=st.integers(0, 3 * 24 * 60),
    nodepool=pools,
    probes=st.lists(st.floats(0, 1, exclude_max=True), max_size=8),
)
def test_allowed_slots_are_exactly_where_no_freeze_is_open(
    windows: list[Window], start: datetime, span_minutes: int, nodepool: str | None, probes: list[float]
) -> None:
    end = start + timedelta(minutes=span_minutes)
    slots = allowed_slots(windows, start, end, nodepool)
    # The slots are sorted, disjoint, non-empty and inside [start, end)
    for slot in slots:
        assert start <= slot.start < slot.end <= end
    for earlier, later in pairwise(slots):
        assert earlier.end < later.start
    # And an instant is in a slot exactly when the windows do not freeze it
    edges = [slot.start for slot in slots] + [slot.end - timedelta(microseconds=1) for slot in slots]
    last = end - timedelta(microseconds=1)
    points = edges + [min(start + (end - start) * fraction, last) for fraction in probes if end > start]
    for point in points:
        inside = any(slot.start <= point < slot.end for slot in slots)
        assert inside == (voluntary_allowance(windows, point, nodepool, 0).allowed != 0)


def _occurrences_opening_before(window: Window, now: datetime, deadline: datetime) -> list[datetime] | None:
    """Every fire time whose occurrence is open at ``now`` or later and opens before ``deadline``."""
    fires = []
    fired = window.next_fire(now - window.duration)  # occurrences still open at now count too
    while fired < deadline:
        fires.append(fired)
        if len(fires) > 300:
            return None  # too many to enumerate cheaply
        fired = window.next_fire(fired)
    return fires


def _usable_for(
    windows: list[Window],
    occurrence: tuple[datetime, datetime],
    now: datetime,
    deadline: datetime,
    nodepool: str | None,
) -> timedelta:
    opened, closes = occurrence
    if max(opened, now) >= min(closes, deadline):
        return timedelta()
    slots = allowed_slots(windows, max(opened, now), min(closes, deadline), nodepool)
    return max((slot.end - slot.start for slot in slots), default=timedelta())


@settings(SETTINGS, max_examples=60)
@given(
    windows=policies(),
    now=instants,
    horizon_minutes=st.integers(1, 10 * 24 * 60),
    needed_minutes=st.integers(1, 12 * 60),
    nodepool=pools,
)
def test_the_planned_window_is_the_latest_allowed_long_enough_before_the_deadline(
    windows: list[Window], now: datetime, horizon_minutes: int, needed_minutes: int, nodepool: str | None
) -> None:
    deadline = now + timedelta(minutes=horizon_minutes)
    needed = timedelta(minutes=needed_minutes)
    # Given, by brute force, every occurrence that qualifies
    qualifying: list[tuple[datetime, int, str]] = []
    for index, window in enumerate(windows):
        if window.max_disruptions == 0 or not window.applies_to(nodepool):
            continue
        fires = _occurrences_opening_before(window, now, deadline)
        assume(fires is not None)
        assert fires is not None
        for fire in fires:
            if _usable_for(windows, (fire, fire + window.duration), now, deadline, nodepool) >= needed:
                qualifying.append((fire, -index, window.name))
    # When
    plan = latest_allowed_window_before(windows, now, deadline, nodepool, needed)
    # Then it is the latest qualifying occurrence (ties: the earliest-listed window)
    if not qualifying:
        assert plan is None
        return
    latest, _, name = max(qualifying)
    assert plan is not None
    assert (plan.opened_at, plan.name) == (latest, name)
    # And its usable stretch is allowed, long enough, within the occurrence, before the deadline
    usable = plan.usable
    assert usable is not None
    assert usable.end <= deadline  # only the part before the deadline counts
    assert max(now, plan.opened_at) <= usable.start
    assert usable.end <= plan.closes_at
    assert usable.end - usable.start >= needed
    for point in (usable.start, usable.end - timedelta(microseconds=1)):
        assert voluntary_allowance(windows, point, nodepool, 0).allowed != 0
