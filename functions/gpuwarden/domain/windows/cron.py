"""Cron schedules: parse a 5-field expression and search its fire times on naive wall-clock minutes.

This module knows nothing about time zones: it answers "which local wall-clock minutes match".
Turning those into instants (and what happens at DST changes) is ``zones``' job.

Syntax (read in the window's IANA time zone):

- ``*``, lists ``1,2``, ranges ``1-5``, steps ``*/15``, ``1-30/5`` and ``5/15`` (= ``5-59/15``),
  month names ``JAN``..``DEC`` and day names ``SUN``..``SAT`` (any case, also in ranges:
  ``MON-FRI``). Day-of-week is 0-7, 0 and 7 both Sunday. Ranges never wrap: write
  ``SAT,SUN`` or ``6-7``, not ``SAT-SUN``. The macros ``@hourly``, ``@daily``/``@midnight``,
  ``@weekly``, ``@monthly`` and ``@yearly``/``@annually`` are accepted.
- Day-of-month and day-of-week, as in Vixie cron and cronie: when both fields are
  restricted, a day matches if EITHER matches (``0 0 13 * FRI`` fires on every 13th and
  on every Friday); when either field starts with ``*`` (``*`` or ``*/2``), a day must
  match both. So ``0 0 */2 * MON`` fires on Mondays that are odd days of the month.
- A schedule that matches no date at all (``0 0 31 2 *``) is rejected when parsed; a search
  never looks further than 28 years (``SEARCH_LIMIT``, a full cycle of weekdays).

A second dialect, ``parse_robfig``, reads a schedule as Karpenter reads a NodePool budget's
``schedule``: robfig/cron v3's ``ParseStandard`` (docs/cluster.md, "The NodePool's own rules").
It differs from the above in four places, each from robfig/cron's parser.go / spec.go: ``?`` is
``*``; day-of-week is 0-6 (7 is out of range); a day field counts as ``*`` for the either/both
rule only when one of its ranges starts with ``*`` or ``?`` and has no step above 1 (so
``*/2`` is restricted there); and a schedule that never fires is accepted (``fires`` is then
False for an empty field; the search simply finds nothing for an impossible date).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import lru_cache

__all__ = ["SEARCH_LIMIT", "CronError", "CronSchedule", "parse_cron", "parse_robfig"]

#: How far a fire-time search looks: 28 years, one full cycle of the calendar's weekdays.
SEARCH_LIMIT = timedelta(days=28 * 366)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)


class CronError(ValueError):
    """A schedule that does not parse, or never fires. The message names the schedule."""


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

    @property
    def fires(self) -> bool:
        """Every field allows some value (robfig/cron accepts a field of bare commas, which allows none)."""
        return all((self.minutes, self.hours, self.days, self.months, self.weekdays))

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
        candidate: datetime | None = start if self.fires else None
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
        candidate: datetime | None = end.replace(second=0, microsecond=0) if self.fires else None
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


# ----------------------------------------------------------------------------- robfig/cron v3


_ROBFIG_FIELDS = (*_FIELDS[:4], _FieldSpec("day-of-week", 0, 6, _DAY_NAMES))


def _robfig_int(token: str, spec: _FieldSpec) -> int:
    """strconv.Atoi, then the field's names (lower-cased, as parseIntOrName does)."""
    if token.upper() in spec.names:
        return spec.names[token.upper()]
    digits = token[1:] if token[:1] in "+-" else token
    if not (digits.isascii() and digits.isdigit()):
        raise _FieldError(f"{spec.label}: failed to parse int from {token!r}")
    value = int(token)
    if value < 0:
        raise _FieldError(f"{spec.label}: negative number ({value}) not allowed")
    return value


def _robfig_range(expr: str, spec: _FieldSpec) -> tuple[range, bool]:
    """getRange: (the values, whether the star bit is set)."""
    parts = expr.split("/")
    if len(parts) > 2:
        raise _FieldError(f"{spec.label}: too many slashes: {expr}")
    bounds = parts[0].split("-")
    star = bounds[0] in ("*", "?")
    if star:
        first, last = spec.low, spec.high
    elif len(bounds) > 2:
        raise _FieldError(f"{spec.label}: too many hyphens: {expr}")
    else:
        first = _robfig_int(bounds[0], spec)
        last = _robfig_int(bounds[1], spec) if len(bounds) == 2 else first
    step = 1
    if len(parts) == 2:
        step = _robfig_int(parts[1], _FieldSpec(spec.label, 0, 2**31, {}))
        if len(bounds) == 1:  # "N/step" means "N-max/step"
            last = spec.high
        star = star and step <= 1
    if first < spec.low or last > spec.high:
        raise _FieldError(f"{spec.label}: range {expr!r} is outside {spec.low}-{spec.high}")
    if first > last:
        raise _FieldError(f"{spec.label}: beginning of range ({first}) beyond end of range ({last}): {expr}")
    if step == 0:
        raise _FieldError(f"{spec.label}: step of range should be a positive number: {expr}")
    return range(first, last + 1, step), star


def _robfig_field(text: str, spec: _FieldSpec) -> tuple[tuple[int, ...], bool]:
    values: set[int] = set()
    star = False
    for expr in (e for e in text.split(",") if e):  # strings.FieldsFunc drops empty items
        found, starred = _robfig_range(expr, spec)
        values.update(found)
        star = star or starred
    return tuple(sorted(values)), star


@lru_cache(maxsize=512)
def parse_robfig(text: str) -> CronSchedule:
    """A schedule as Karpenter parses a budget's: ``cron.ParseStandard("TZ=UTC " + schedule)``
    (kubernetes-sigs/karpenter pkg/apis/v1/nodepool.go, ``Budget.IsActive``). Raises ``CronError``
    where robfig/cron returns an error: Karpenter then allows no disruption of the pool."""
    spec = text.strip()
    if spec.startswith("@"):  # parseDescriptor: exact names; `@every` is refused by the CRD's pattern
        if spec not in _MACROS:
            raise CronError(f"invalid schedule {text!r}: unrecognized descriptor")
        spec = _MACROS[spec]
    fields = spec.split()
    if len(fields) != len(_ROBFIG_FIELDS):
        raise CronError(f"invalid schedule {text!r}: expected exactly 5 fields, found {len(fields)}")
    try:
        parsed = [_robfig_field(f, spec) for f, spec in zip(fields, _ROBFIG_FIELDS, strict=True)]
    except _FieldError as error:
        raise CronError(f"invalid schedule {text!r}: {error}") from None
    return CronSchedule(
        text=text,
        minutes=parsed[0][0],
        hours=parsed[1][0],
        days=parsed[2][0],
        months=parsed[3][0],
        weekdays=parsed[4][0],
        days_or_weekdays=not parsed[2][1] and not parsed[4][1],
    )
