"""Window durations: the compact text form (``10h``, ``1h30m``) and its bounds."""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["MAX_DURATION", "check_duration", "format_duration", "parse_duration"]

MAX_DURATION = timedelta(days=7)

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
    check_duration(duration, text)
    return duration


def check_duration(duration: timedelta, text: object) -> None:
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
