"""Wall clock ↔ instant in a window's time zone, and the fire instants of a schedule there.

Instants are timezone-aware; results are aware datetimes in UTC, because Python compares and
subtracts two datetimes that share a ``ZoneInfo`` by their wall clocks, ignoring ``fold``,
which is wrong around DST changes.

Daylight saving time. A fire time is a wall-clock time in the window's zone, and it fires
at the first instant whose local wall-clock time is at or past it:

- a wall time that does not exist (the spring-forward gap, e.g. 02:30 on the US
  spring-forward night) fires at the first instant after the gap (03:00 local), as cronie
  and Vixie cron run jobs of the skipped hour right after the change; several fire times in
  one gap collapse into that one instant;
- an ambiguous wall time (the fall-back overlap) fires once, at its first occurrence
  (``fold=0``); the repeated hour does not fire again.

Durations are elapsed time, not wall-clock time (see ``model``): a window's local closing
time moves by the DST shift when one falls inside it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from gpuwarden.domain.windows.cron import SEARCH_LIMIT, CronError, CronSchedule

__all__ = ["as_utc", "next_fire", "prev_fire", "wall_to_instant"]

_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)


def as_utc(instant: datetime, what: str = "now") -> datetime:
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
    after_utc = as_utc(after, "after")
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
    at_utc = as_utc(at, "at")
    local = at_utc.astimezone(zone)
    wall = local.replace(tzinfo=None, fold=0)
    # In the second pass of a repeated hour, later wall times already fired (first pass).
    repeat = (wall.replace(tzinfo=zone).utcoffset() or timedelta()) - (local.utcoffset() or timedelta())
    upper = wall + max(repeat, timedelta())
    floor = as_utc(not_before, "not_before") if not_before is not None else None
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
