"""How many more voluntary disruptions the open windows allow now, and which window says so.

When several windows are open for a NodePool, the most restrictive wins: the smallest
``max_disruptions``, ties going to the earliest-listed window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwarden.domain.windows.model import OpenWindow, Window
from gpuwarden.domain.windows.planning import open_windows

__all__ = ["Allowance", "most_restrictive", "voluntary_allowance"]


@dataclass(frozen=True)
class Allowance:
    """How many more voluntary disruptions are allowed now (None: no limit), and who says so."""

    allowed: int | None
    window: str | None
    reason: str


def most_restrictive(opened: list[OpenWindow]) -> OpenWindow:
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
    decider = most_restrictive(opened)
    limit = decider.window.max_disruptions
    if limit == 0:
        reason = f"window {decider.name!r} {decider.describe()} freezes voluntary disruption"
        return Allowance(allowed=0, window=decider.name, reason=reason)
    allowed = max(0, limit - in_progress)
    reason = f"window {decider.name!r} allows {limit}, {in_progress} in progress: {allowed} more {decider.describe()}"
    return Allowance(allowed=allowed, window=decider.name, reason=reason)
