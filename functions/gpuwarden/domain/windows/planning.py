"""Which windows are open when, where a voluntary disruption is allowed, and the latest window before a deadline.

Overlapping windows are allowed. A freezing window (``max_disruptions == 0``) forbids voluntary
disruption while open; a window with ``max_disruptions > 0`` caps how many, not when.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from gpuwarden.domain.windows.model import OpenWindow, Slot, Window
from gpuwarden.domain.windows.zones import as_utc

__all__ = ["allowed_slots", "applicable", "latest_allowed_window_before", "next_change", "open_windows"]


def applicable(windows: Sequence[Window], nodepool: str | None) -> list[Window]:
    return [window for window in windows if window.applies_to(nodepool)]


def open_windows(windows: Sequence[Window], now: datetime, nodepool: str | None = None) -> list[OpenWindow]:
    """The windows open at ``now`` that cover ``nodepool``, in policy order.

    ``nodepool=None`` is a node outside Karpenter: only windows without ``nodepools`` apply.
    """
    found = (window.occurrence_at(now) for window in applicable(windows, nodepool))
    return [occurrence for occurrence in found if occurrence is not None]


def next_change(windows: Sequence[Window], now: datetime) -> datetime | None:
    """The next instant (UTC) after ``now`` at which any window opens or closes (None: no windows).

    For every NodePool. A window that fires again while open counts as a change (nothing
    visible changes then), so a caller may wake up for nothing but never misses a change.
    """
    now_utc = as_utc(now)
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
    freezes = [window for window in applicable(windows, nodepool) if window.max_disruptions == 0]
    return _merge([slot for window in freezes for slot in _coverage(window, start, end)])


def allowed_slots(windows: Sequence[Window], start: datetime, end: datetime, nodepool: str | None) -> list[Slot]:
    """The slots of ``[start, end)`` in which a voluntary disruption of ``nodepool`` is allowed.

    Allowed means no freezing window (``max_disruptions == 0``) covering the pool is open;
    a window with ``max_disruptions > 0`` caps how many, not when.
    """
    start_utc, end_utc = as_utc(start, "start"), as_utc(end, "end")
    slots: list[Slot] = []
    cursor = start_utc
    for frozen in _frozen_slots(windows, start_utc, end_utc, nodepool):
        if frozen.start > cursor:
            slots.append(Slot(cursor, frozen.start))
        cursor = max(cursor, frozen.end)
    if cursor < end_utc:
        slots.append(Slot(cursor, end_utc))
    return slots


def _latest_in_gap(window: Window, gap: Slot, needed: timedelta) -> OpenWindow | None:
    """The latest occurrence that shares at least ``needed`` with ``gap`` (which ends by the
    deadline: an occurrence closing after the deadline counts for its part before it)."""
    duration = window.duration
    opened = window.prev_fire(gap.end - needed, not_before=gap.start - duration)
    if opened is None:
        return None
    usable = Slot(max(opened, gap.start), min(opened + duration, gap.end))
    if usable.end - usable.start < needed:
        return None  # earlier occurrences share even less with this gap
    return OpenWindow(window=window, opened_at=opened, closes_at=opened + duration, usable=usable)


def _latest_fitting(window: Window, gaps: list[Slot], needed: timedelta) -> OpenWindow | None:
    """The latest occurrence of ``window`` usable for ``needed`` in one of ``gaps``."""
    for gap in reversed(gaps):  # an occurrence found in a later gap is never earlier
        found = _latest_in_gap(window, gap, needed)
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
    that are open at ``now`` or open later, before ``deadline``. Only the part of an occurrence
    before the deadline counts: a 22:00-06:00 window serves a 02:00 deadline with its four
    hours before it. In that part, an allowed stretch (see ``allowed_slots``: from ``now`` on,
    clear of freezing windows) of at least ``needed`` (the drain allowance) must lie; the latest
    such stretch is the result's ``usable``, and it always ends by ``deadline``. The latest
    ``opened_at`` wins (then the earliest-listed window). None if there is none: the caller
    then disrupts at once.
    """
    now_utc, deadline_utc = as_utc(now), as_utc(deadline, "deadline")
    if needed <= timedelta():
        raise ValueError(f"needed must be a positive duration, got {needed}")
    gaps = [slot for slot in allowed_slots(windows, now_utc, deadline_utc, nodepool) if slot.end - slot.start >= needed]
    best: OpenWindow | None = None
    for window in applicable(windows, nodepool):
        if window.max_disruptions == 0 or window.duration < needed:
            continue
        found = _latest_fitting(window, gaps, needed)
        if found is not None and (best is None or found.opened_at > best.opened_at):
            best = found
    return best
