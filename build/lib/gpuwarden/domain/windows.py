"""Budget windows (CONTRACT §4): pure window arithmetic, no I/O and no clock.

Every function takes ``now`` (or another instant) as an argument; instants must be
timezone-aware. Results are aware datetimes in UTC (``OpenWindow.local_*`` give the
window's local view), because Python compares and subtracts two datetimes that share a
``ZoneInfo`` by their wall clocks, ignoring ``fold``, which is wrong around DST changes.

Schedules are 5-field cron expressions (minute hour day-of-month month day-of-week), read
in the window's IANA time zone:

- ``*``, lists ``1,2``, ranges ``1-5``, steps ``*/15``, ``1-30/5`` and ``5/15`` (= ``5-59/15``),
  month names ``JAN``..``DEC`` and day names ``SUN``..``SAT`` (any case, also in ranges:
  ``MON-FRI``). Day-of-week is 0-7, 0 and 7 both Sunday. Ranges never wrap: write
  ``SAT,SUN`` or ``6-7``, not ``SAT-SUN``. The macros ``@hourly``, ``@daily``/``@midnight``,
  ``@weekly``, ``@monthly`` and ``@yearly``/``@annually`` are accepted.
- Day-of-month and day-of-week, as in Vixie cron and cronie: when both fields are
  restricted, a day matches if EITHER matches (``0 0 13 * FRI`` fires on every 13th and
  on every Friday); when either field starts with ``*`` (``*`` or ``*/2``), a day must
  match both. So ``0 0 */2 * MON`` fires on Mondays that are odd days of the month.
- A schedule that matches no date at all (``0 0 31 2 *``) is rejected when the window is
  validated; a search never looks further than 28 years (a full cycle of weekdays).

Daylight saving time. A fire time is a wall-clock time in the window's zone, and it fires
at the first instant whose local wall-clock time is at or past it:

- a wall time that does not exist (the spring-forward gap, e.g. 02:30 on the US
  spring-forward night) fires at the first instant after the gap (03:00 local), as cronie
  and Vixie cron run jobs of the skipped hour right after the change; several fire times in
  one gap collapse into that one instant;
- an ambiguous wall time (the fall-back overlap) fires once, at its first occurrence
  (``fold=0``); the repeated hour does not fire again.

The duration is elapsed time: a window opened by the fire time ``f`` is open on
``[f, f + duration)`` in real time, so a 10h window opened at 09:00 closes 10 real hours
later even across a DST change (its local closing time then moves by the DST shift). A
window that fires again while still open simply continues: its current occurrence is the
one of its latest fire time.

Overlapping windows are allowed. When several windows are open for a NodePool, the most
restrictive wins: the smallest ``max_disruptions``, ties going to the earliest-listed window.
A window with ``nodepools`` applies only to those NodePools; a node outside Karpenter
(``nodepool=None``) is covered only by windows without a ``nodepools`` filter.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Annotated, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_serializer, field_validator

__all__ = [
    "MAX_DURATION",
    "SEARCH_LIMIT",
    "Allowance",
    "CronError",
    "CronSchedule",
    "NodePoolDesired",
    "OpenWindow",
    "Slot",
    "Window",
    "Windows",
    "allowed_slots",
    "desired_nodepool_state",
    "format_duration",
    "latest_allowed_window_before",
    "next_change",
    "open_windows",
    "parse_cron",
    "parse_duration",
    "validate_windows",
    "voluntary_allowance",
    "wall_to_instant",
]

MAX_DURATION = timedelta(days=7)
#: How far a fire-time search looks: 28 years, one full cycle of the calendar's weekdays.
SEARCH_LIMIT = timedelta(days=28 * 366)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)


class CronError(ValueError):
    """A schedule that does not parse, or never fires. The message names the schedule."""


# --------------------------------------------------------------------------- cron parsing

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1
    )
}
_DAY_NAMES = {name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class _FieldSpec:
    label: str
    low: int
    high: int
    names: dict[str, int]

    def describe(self) -> str:
        numbers = f"a number {self.low}-{self.high}"
        if not self.names:
            return numbers
        first, last = next(iter(self.names)), list(self.names)[-1]
        return f"{numbers} or a name {first}-{last}"


_FIELDS = (
    _FieldSpec("minute", 0, 59, {}),
    _FieldSpec("hour", 0, 23, {}),
    _FieldSpec("day-of-month", 1, 31, {}),
    _FieldSpec("month", 1, 12, _MONTH_NAMES),
    _FieldSpec("day-of-week", 0, 7, _DAY_NAMES),
)


class _FieldError(Exception):
    pass


def _parse_value(token: str, spec: _FieldSpec) -> int:
    if token.isascii() and token.isdigit():
        value = int(token)
        if not spec.low <= value <= spec.high:
            raise _FieldError(f"{spec.label} {value} is out of range {spec.low}-{spec.high}")
        return value
    if token.upper() in spec.names:
        return spec.names[token.upper()]
    raise _FieldError(f"{spec.label} {token!r} is not {spec.describe()}")


def _parse_step(text: str, spec: _FieldSpec) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise _FieldError(f"{spec.label} step {text!r} is not a positive number")
    return int(text)


def _parse_part(part: str, spec: _FieldSpec) -> range:
    base, slash, step_text = part.partition("/")
    step = _parse_step(step_text, spec) if slash else 1
    if base == "*":
        return range(spec.low, spec.high + 1, step)
    first_text, dash, last_text = base.partition("-")
    first = _parse_value(first_text, spec)
    if not dash:
        return range(first, (spec.high if slash else first) + 1, step)
    last = _parse_value(last_text, spec)
    if first > last:
        raise _FieldError(f"{spec.label} range {base!r} runs backwards (ranges do not wrap; use a list)")
    return range(first, last + 1, step)


def _parse_field(text: str, spec: _FieldSpec) -> tuple[int, ...]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise _FieldError(f"{spec.label} field {text!r} has an empty list item")
        values.update(_parse_part(part, spec))
    if spec.label == "day-of-week" and 7 in values:
        values = (values - {7}) | {0}
    return tuple(sorted(values))


def _next_in(values: tuple[int, ...], at_least: int) -> int | None:
    index = bisect_left(values, at_least)
    return values[index] if index < len(values) else None


def _prev_in(values: tuple[int, ...], at_most: int) -> int | None:
    index = bisect_right(values, at_most)
    return values[index - 1] if index else None


def _month_start(year: int, month: int) -> datetime:
    return datetime(year, month, 1)


def _month_last_minute(year: int, month: int) -> datetime:
    following = datetime(year + 1, 1, 1) if month == 12 else datetime(year, month + 1, 1)
    return following - _MINUTE


@dataclass(frozen=True)
class CronSchedule:
    """A parsed 5-field cron schedule, evaluated on naive local (wall-clock) times."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]  # 0 = Sunday … 6 = Saturday
    days_or_weekdays: bool  # both day fields restricted: a day matches if either matches

    def day_matches(self, day: date) -> bool:
        by_day = day.day in self.days
        by_weekday = day.isoweekday() % 7 in self.weekdays
        return (by_day or by_weekday) if self.days_or_weekdays else (by_day and by_weekday)

    def matches(self, wall: datetime) -> bool:
        """Whether the naive wall-clock minute ``wall`` is a fire time (seconds ignored)."""
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and self.day_matches(wall.date())
        )

    def next_match(self, start: datetime, limit: datetime) -> datetime | None:
        """The first matching wall minute at or after ``start`` (rounded up), or None past ``limit``."""
        if start.second or start.microsecond:
            start = start.replace(second=0, microsecond=0) + _MINUTE
        candidate: datetime | None = start
        while candidate is not None and candidate <= limit:
            found, candidate = self._forward_step(candidate)
            if found:
                return candidate
        return None

    def _forward_step(self, t: datetime) -> tuple[bool, datetime | None]:
        """One step of the forward search: (True, match) or (False, the next place to look)."""
        if t.month not in self.months:
            month = _next_in(self.months, t.month)
            if month is None:
                return False, _month_start(t.year + 1, self.months[0])
            return False, _month_start(t.year, month)
        if not self.day_matches(t.date()):
            return False, datetime.combine(t.date() + _DAY, time())
        hour = _next_in(self.hours, t.hour)
        if hour is None:
            return False, datetime.combine(t.date() + _DAY, time())
        if hour != t.hour:
            t = t.replace(hour=hour, minute=0)
        minute = _next_in(self.minutes, t.minute)
        if minute is None:
            return False, t.replace(minute=0) + timedelta(hours=1)
        return True, t.replace(minute=minute)

    def prev_match(self, end: datetime, limit: datetime) -> datetime | None:
        """The last matching wall minute at or before ``end`` (rounded down), or None before ``limit``."""
        candidate: datetime | None = end.replace(second=0, microsecond=0)
        while candidate is not None and candidate >= limit:
            found, candidate = self._backward_step(candidate)
            if found:
                return candidate
        return None

    def _backward_step(self, t: datetime) -> tuple[bool, datetime | None]:
        """One step of the backward search: (True, match) or (False, the next place to look)."""
        if t.month not in self.months:
            month = _prev_in(self.months, t.month)
            if month is None:
                return False, _month_last_minute(t.year - 1, self.months[-1])
            return False, _month_last_minute(t.year, month)
        if not self.day_matches(t.date()):
            return False, datetime.combine(t.date(), time()) - _MINUTE
        hour = _prev_in(self.hours, t.hour)
        if hour is None:
            return False, datetime.combine(t.date(), time()) - _MINUTE
        if hour != t.hour:
            t = t.replace(hour=hour, minute=59)
        minute = _prev_in(self.minutes, t.minute)
        if minute is None:
            return False, t.replace(minute=0) - _MINUTE
        return True, t.replace(minute=minute)


@lru_cache(maxsize=512)
def parse_cron(text: str) -> CronSchedule:
    """Parse a 5-field cron schedule; raise ``CronError`` naming the schedule and the field."""
    expression = _MACROS.get(text.strip().lower(), text)
    fields = expression.split()
    if len(fields) != len(_FIELDS):
        raise CronError(
            f"invalid schedule {text!r}: expected 5 fields "
            f"(minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    try:
        parsed = [_parse_field(field, spec) for field, spec in zip(fields, _FIELDS, strict=True)]
    except _FieldError as error:
        raise CronError(f"invalid schedule {text!r}: {error}") from None
    schedule = CronSchedule(
        text=text,
        minutes=parsed[0],
        hours=parsed[1],
        days=parsed[2],
        months=parsed[3],
        weekdays=parsed[4],
        days_or_weekdays=not fields[2].startswith("*") and not fields[4].startswith("*"),
    )
    # 2000-2027 holds every (date, weekday) pair, 29 February included.
    if schedule.next_match(datetime(2000, 1, 1), datetime(2028, 1, 1)) is None:
        raise CronError(
            f"invalid schedule {text!r}: it never fires "
            "(no date matches its day-of-month, month and day-of-week fields)"
        )
    return schedule


# ------------------------------------------------------------------ wall clock ↔ instant


def _utc(instant: datetime, what: str = "now") -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {instant.isoformat()}")
    return instant.astimezone(UTC)


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def _from_timestamp(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def wall_to_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant (UTC) whose local wall-clock time in ``zone`` is at or past ``wall``.

    A normal wall time maps to its one instant; an ambiguous one (fall-back) to its first
    occurrence; one inside a spring-forward gap to the first instant after the gap.
    """
    wall = wall.replace(tzinfo=None, fold=0)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall(first, zone) == wall:
        return first
    other = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    low = math.floor(min(first, other).timestamp())
    high = math.ceil(max(first, other).timestamp())
    if _wall(_from_timestamp(low), zone) >= wall:
        return _from_timestamp(low)
    # Invariant: wall(low) < wall <= wall(high); tz transitions fall on whole seconds.
    while high - low > 1:
        middle = (low + high) // 2
        if _wall(_from_timestamp(middle), zone) >= wall:
            high = middle
        else:
            low = middle
    return _from_timestamp(high)


def _search_limit(wall: datetime, forward: bool) -> datetime:
    try:
        return wall + SEARCH_LIMIT if forward else wall - SEARCH_LIMIT
    except OverflowError:
        return datetime.max if forward else datetime.min


def next_fire(schedule: CronSchedule, zone: ZoneInfo, after: datetime) -> datetime:
    """The first fire instant (UTC) strictly after ``after``."""
    after_utc = _utc(after, "after")
    wall = _wall(after_utc, zone)
    start = wall.replace(second=0, microsecond=0) + _MINUTE
    limit = _search_limit(wall, forward=True)
    while True:
        candidate = schedule.next_match(start, limit)
        if candidate is None:
            raise CronError(f"schedule {schedule.text!r} does not fire within 28 years after {after_utc}")
        instant = wall_to_instant(candidate, zone)
        if instant > after_utc:
            return instant
        start = candidate + _MINUTE  # a repeated (fall-back) hour already fired


def prev_fire(
    schedule: CronSchedule, zone: ZoneInfo, at: datetime, not_before: datetime | None = None
) -> datetime | None:
    """The latest fire instant (UTC) at or before ``at`` (and not before ``not_before``), or None."""
    at_utc = _utc(at, "at")
    local = at_utc.astimezone(zone)
    wall = local.replace(tzinfo=None, fold=0)
    # In the second pass of a repeated hour, later wall times already fired (first pass).
    repeat = (wall.replace(tzinfo=zone).utcoffset() or timedelta()) - (local.utcoffset() or timedelta())
    upper = wall + max(repeat, timedelta())
    floor = _utc(not_before, "not_before") if not_before is not None else None
    lower = _search_limit(wall, forward=False) if floor is None else _wall(floor, zone) - _DAY
    while True:
        candidate = schedule.prev_match(upper, lower)
        if candidate is None:
            return None
        instant = wall_to_instant(candidate, zone)
        if floor is not None and instant < floor:
            return None
        if instant <= at_utc:
            return instant
        upper = candidate - _MINUTE


# ------------------------------------------------------------------------------ durations

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> timedelta:
    """``"10h"``, ``"30m"``, ``"1h30m"``, ``"90s"``, ``"1d12h"`` → timedelta, > 0 and ≤ 7 days."""
    compact = text.strip().lower()
    match = _DURATION.fullmatch(compact)
    if not compact or match is None:
        raise ValueError(
            f"invalid duration {text!r}: expected a number with units d, h, m, s in that order, "
            "such as '10h', '30m' or '1h30m'"
        )
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    _check_duration(duration, text)
    return duration


def _check_duration(duration: timedelta, text: object) -> None:
    if duration <= timedelta():
        raise ValueError(f"invalid duration {text!r}: a window must last longer than zero")
    if duration > MAX_DURATION:
        raise ValueError(f"invalid duration {text!r}: a window lasts at most 7 days")


def format_duration(duration: timedelta) -> str:
    """The compact form ``parse_duration`` reads: ``timedelta(hours=1, minutes=30)`` → ``"1h30m"``."""
    seconds = int(duration.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


# ---------------------------------------------------------------------------- the window

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Window(BaseModel):
    """One budget window of the policy (CONTRACT §4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    schedule: str
    timezone: str = "UTC"
    duration: timedelta
    max_disruptions: int = Field(ge=0)
    nodepools: list[str] | None = None
    gpu_limit: int | None = Field(default=None, ge=0)

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"invalid window name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        return name

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, schedule: str) -> str:
        parse_cron(schedule)
        return schedule

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, timezone: str) -> str:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(
                f"unknown time zone {timezone!r}: expected an IANA name such as 'Asia/Seoul' or 'UTC'"
            ) from None
        return timezone

    @field_validator("duration", mode="before")
    @classmethod
    def _read_duration(cls, value: object) -> timedelta:
        if isinstance(value, timedelta):
            _check_duration(value, format_duration(value))
            return value
        if isinstance(value, str):
            return parse_duration(value)
        raise ValueError(f"invalid duration {value!r}: expected a string such as '10h', '30m' or '1h30m'")

    @field_serializer("duration")
    def _write_duration(self, duration: timedelta) -> str:
        return format_duration(duration)

    @field_validator("nodepools")
    @classmethod
    def _check_nodepools(cls, nodepools: list[str] | None) -> list[str] | None:
        if nodepools is not None and (not nodepools or not all(pool.strip() for pool in nodepools)):
            raise ValueError("nodepools must name at least one NodePool (leave it out to cover all)")
        return nodepools

    def __hash__(self) -> int:
        return hash((self.name, self.schedule, self.timezone, self.duration, self.max_disruptions))

    @property
    def cron(self) -> CronSchedule:
        return parse_cron(self.schedule)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def applies_to(self, nodepool: str | None) -> bool:
        """Whether this window covers ``nodepool`` (None: a node outside Karpenter)."""
        return self.nodepools is None or (nodepool is not None and nodepool in self.nodepools)

    def next_fire(self, after: datetime) -> datetime:
        """The first instant (UTC) strictly after ``after`` at which this window opens."""
        return next_fire(self.cron, self.zone, after)

    def prev_fire(self, at: datetime, not_before: datetime | None = None) -> datetime | None:
        """The latest instant (UTC) at or before ``at`` at which this window opened."""
        return prev_fire(self.cron, self.zone, at, not_before)

    def occurrence_at(self, now: datetime) -> OpenWindow | None:
        """The occurrence of this window open at ``now``, if any."""
        now_utc = _utc(now)
        opened = self.prev_fire(now_utc, not_before=now_utc - self.duration)
        if opened is None or now_utc >= opened + self.duration:
            return None
        return OpenWindow(window=self, opened_at=opened, closes_at=opened + self.duration)


def validate_windows(windows: Sequence[Window]) -> list[Window]:
    """Check a policy's list of windows as a whole: names are unique. Returns the list."""
    seen: set[str] = set()
    duplicates: set[str] = set()
    for window in windows:
        (duplicates if window.name in seen else seen).add(window.name)
    if duplicates:
        raise ValueError(f"window names must be unique; repeated: {', '.join(map(repr, sorted(duplicates)))}")
    return list(windows)


#: ``windows: Windows = Field(default_factory=list)`` validates the list as a whole.
Windows = Annotated[list[Window], AfterValidator(validate_windows)]


class Slot(NamedTuple):
    """A half-open interval ``[start, end)`` of UTC instants."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class OpenWindow:
    """One occurrence of a window: open on ``[opened_at, closes_at)`` (UTC instants).

    ``usable`` is set by ``latest_allowed_window_before``: the part of the occurrence, from
    ``now`` on and clear of freezing windows, in which to plan the disruption.
    """

    window: Window
    opened_at: datetime
    closes_at: datetime
    usable: Slot | None = None

    @property
    def name(self) -> str:
        return self.window.name

    @property
    def local_opened_at(self) -> datetime:
        return self.opened_at.astimezone(self.window.zone)

    @property
    def local_closes_at(self) -> datetime:
        return self.closes_at.astimezone(self.window.zone)

    def is_open(self, now: datetime) -> bool:
        return self.opened_at <= _utc(now) < self.closes_at

    def describe(self) -> str:
        """``(Asia/Seoul, open until 2026-11-23T19:00:00+09:00)``."""
        return f"({self.window.timezone}, open until {self.local_closes_at.isoformat()})"


# ------------------------------------------------------------------- what is open, when


def _applicable(windows: Sequence[Window], nodepool: str | None) -> list[Window]:
    return [window for window in windows if window.applies_to(nodepool)]


def open_windows(windows: Sequence[Window], now: datetime, nodepool: str | None = None) -> list[OpenWindow]:
    """The windows open at ``now`` that cover ``nodepool``, in policy order.

    ``nodepool=None`` is a node outside Karpenter: only windows without ``nodepools`` apply.
    """
    found = (window.occurrence_at(now) for window in _applicable(windows, nodepool))
    return [occurrence for occurrence in found if occurrence is not None]


def next_change(windows: Sequence[Window], now: datetime) -> datetime | None:
    """The next instant (UTC) after ``now`` at which any window opens or closes (None: no windows).

    For every NodePool. A window that fires again while open counts as a change (nothing
    visible changes then), so a caller may wake up for nothing but never misses a change.
    """
    now_utc = _utc(now)
    changes: list[datetime] = []
    for window in windows:
        changes.append(window.next_fire(now_utc))
        occurrence = window.occurrence_at(now_utc)
        if occurrence is not None:
            changes.append(occurrence.closes_at)
    return min(changes, default=None)


def _extend(window: Window, end: datetime, limit: datetime) -> datetime:
    """The end of the run of overlapping occurrences that reaches ``end`` (or ``limit``, if later)."""
    while end < limit:
        fired = window.prev_fire(end, not_before=end - window.duration)
        if fired is None or fired + window.duration <= end:
            return end
        end = fired + window.duration
    return end


def _coverage(window: Window, start: datetime, end: datetime) -> list[Slot]:
    """Where in ``[start, end)`` the window is open, as disjoint sorted slots."""
    slots: list[Slot] = []
    current = window.occurrence_at(start)
    opened = start if current is not None else window.next_fire(start)
    while opened < end:
        closes = _extend(window, opened + window.duration if current is None else current.closes_at, end)
        current = None
        slots.append(Slot(opened, min(closes, end)))
        if closes >= end:
            break
        opened = window.next_fire(closes)
    return slots


def _merge(slots: list[Slot]) -> list[Slot]:
    merged: list[Slot] = []
    for slot in sorted(slots):
        if merged and slot.start <= merged[-1].end:
            merged[-1] = Slot(merged[-1].start, max(merged[-1].end, slot.end))
        else:
            merged.append(slot)
    return merged


def _frozen_slots(windows: Sequence[Window], start: datetime, end: datetime, nodepool: str | None) -> list[Slot]:
    freezes = [window for window in _applicable(windows, nodepool) if window.max_disruptions == 0]
    return _merge([slot for window in freezes for slot in _coverage(window, start, end)])


def allowed_slots(windows: Sequence[Window], start: datetime, end: datetime, nodepool: str | None) -> list[Slot]:
    """The slots of ``[start, end)`` in which a voluntary disruption of ``nodepool`` is allowed.

    Allowed means no freezing window (``max_disruptions == 0``) covering the pool is open;
    a window with ``max_disruptions > 0`` caps how many, not when.
    """
    start_utc, end_utc = _utc(start, "start"), _utc(end, "end")
    slots: list[Slot] = []
    cursor = start_utc
    for frozen in _frozen_slots(windows, start_utc, end_utc, nodepool):
        if frozen.start > cursor:
            slots.append(Slot(cursor, frozen.start))
        cursor = max(cursor, frozen.end)
    if cursor < end_utc:
        slots.append(Slot(cursor, end_utc))
    return slots


def _latest_in_gap(window: Window, gap: Slot, deadline: datetime, needed: timedelta) -> OpenWindow | None:
    """The latest occurrence ending by ``deadline`` that shares at least ``needed`` with ``gap``."""
    duration = window.duration
    opened = window.prev_fire(min(gap.end - needed, deadline - duration), not_before=gap.start - duration)
    if opened is None:
        return None
    usable = Slot(max(opened, gap.start), min(opened + duration, gap.end))
    if usable.end - usable.start < needed:
        return None  # earlier occurrences share even less with this gap
    return OpenWindow(window=window, opened_at=opened, closes_at=opened + duration, usable=usable)


def _latest_fitting(window: Window, gaps: list[Slot], deadline: datetime, needed: timedelta) -> OpenWindow | None:
    """The latest occurrence of ``window`` that ends by ``deadline`` and is usable for ``needed``."""
    for gap in reversed(gaps):  # an occurrence found in a later gap is never earlier
        found = _latest_in_gap(window, gap, deadline, needed)
        if found is not None:
            return found
    return None


def latest_allowed_window_before(
    windows: Sequence[Window],
    now: datetime,
    deadline: datetime,
    nodepool: str | None,
    needed: timedelta,
) -> OpenWindow | None:
    """The latest window occurrence in which to plan a voluntary disruption before ``deadline``.

    Candidates are occurrences of windows with ``max_disruptions > 0`` covering ``nodepool``
    that are open at ``now`` or open later and close by ``deadline``, in which an allowed
    stretch (see ``allowed_slots``: from ``now`` on, clear of freezing windows) of at least
    ``needed`` lies; the latest such stretch is the result's ``usable``. The latest
    ``opened_at`` wins (then the earliest-listed window). None if there is none.
    """
    now_utc, deadline_utc = _utc(now), _utc(deadline, "deadline")
    if needed <= timedelta():
        raise ValueError(f"needed must be a positive duration, got {needed}")
    gaps = [slot for slot in allowed_slots(windows, now_utc, deadline_utc, nodepool) if slot.end - slot.start >= needed]
    best: OpenWindow | None = None
    for window in _applicable(windows, nodepool):
        if window.max_disruptions == 0 or window.duration < needed:
            continue
        found = _latest_fitting(window, gaps, deadline_utc, needed)
        if found is not None and (best is None or found.opened_at > best.opened_at):
            best = found
    return best


# ------------------------------------------------------------------------- the decisions


@dataclass(frozen=True)
class Allowance:
    """How many more voluntary disruptions are allowed now (None: no limit), and who says so."""

    allowed: int | None
    window: str | None
    reason: str


def _most_restrictive(opened: list[OpenWindow]) -> OpenWindow:
    return min(opened, key=lambda occurrence: occurrence.window.max_disruptions)


def voluntary_allowance(windows: Sequence[Window], now: datetime, nodepool: str | None, in_progress: int) -> Allowance:
    """How many MORE voluntary disruptions of ``nodepool`` the windows allow at ``now``.

    ``in_progress`` counts the disruptions already under way (cordoned by gpuwarden, not yet
    gone). No windows, or none open for the pool: unlimited. Otherwise the most restrictive
    open window decides: ``max(0, max_disruptions - in_progress)``.
    """
    if in_progress < 0:
        raise ValueError(f"in_progress must be >= 0, got {in_progress}")
    if not windows:
        return Allowance(allowed=None, window=None, reason="no budget windows configured")
    opened = open_windows(windows, now, nodepool)
    if not opened:
        scope = f" for nodepool {nodepool!r}" if nodepool is not None else " for nodes outside Karpenter"
        return Allowance(allowed=None, window=None, reason=f"no window open{scope}")
    decider = _most_restrictive(opened)
    limit = decider.window.max_disruptions
    if limit == 0:
        reason = f"window {decider.name!r} {decider.describe()} freezes voluntary disruption"
        return Allowance(allowed=0, window=decider.name, reason=reason)
    allowed = max(0, limit - in_progress)
    reason = f"window {decider.name!r} allows {limit}, {in_progress} in progress: {allowed} more {decider.describe()}"
    return Allowance(allowed=allowed, window=decider.name, reason=reason)


@dataclass(frozen=True)
class NodePoolDesired:
    """What a Karpenter NodePool should carry now.

    ``budgets``: the ``spec.disruption.budgets`` to write while a window is open, or None:
    restore the saved original. ``gpu_limit``: the ``spec.limits["nvidia.com/gpu"]`` cap
    while open, or None: restore the saved original.
    """

    budgets: list[dict[str, str]] | None
    gpu_limit: int | None
    windows: tuple[str, ...]
    reason: str


def desired_nodepool_state(windows: Sequence[Window], now: datetime, nodepool: str) -> NodePoolDesired:
    """The disruption budgets and GPU cap the windows want on ``nodepool`` at ``now``."""
    opened = open_windows(windows, now, nodepool)
    if not opened:
        return NodePoolDesired(
            budgets=None, gpu_limit=None, windows=(), reason=f"no window open for nodepool {nodepool!r}"
        )
    decider = _most_restrictive(opened)
    limits = [occurrence.window.gpu_limit for occurrence in opened if occurrence.window.gpu_limit is not None]
    return NodePoolDesired(
        budgets=[{"nodes": str(decider.window.max_disruptions)}],
        gpu_limit=min(limits, default=None),
        windows=tuple(occurrence.name for occurrence in opened),
        reason=f"window {decider.name!r} {decider.describe()} allows {decider.window.max_disruptions}",
    )
