"""The window of the policy (name, schedule in a time zone, duration, what it allows) and its occurrences.

The duration is elapsed time: a window opened by the fire time ``f`` is open on
``[f, f + duration)`` in real time, so a 10h window opened at 09:00 closes 10 real hours
later even across a DST change (its local closing time then moves by the DST shift; when
``f`` itself is, see ``zones``). A window that fires again while still open simply
continues: its current occurrence is the one of its latest fire time.

A window with ``nodepools`` applies only to those NodePools; a node outside Karpenter
(``nodepool=None``) is covered only by windows without a ``nodepools`` filter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_serializer, field_validator

from gpuwarden.domain.windows.cron import CronSchedule, parse_cron
from gpuwarden.domain.windows.durations import check_duration, format_duration, parse_duration
from gpuwarden.domain.windows.zones import as_utc, next_fire, prev_fire

__all__ = ["OpenWindow", "Slot", "Window", "Windows", "validate_windows"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Window(BaseModel):
    """One budget window of the policy (docs/windows.md)."""

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
            check_duration(value, format_duration(value))
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
        now_utc = as_utc(now)
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
        return self.opened_at <= as_utc(now) < self.closes_at

    def describe(self) -> str:
        """``(Asia/Seoul, open until 2026-11-23T19:00:00+09:00)``."""
        return f"({self.window.timezone}, open until {self.local_closes_at.isoformat()})"
