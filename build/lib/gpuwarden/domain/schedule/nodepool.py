"""What the open windows want written on a Karpenter NodePool: disruption budgets and a GPU cap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwarden.domain.schedule.allowance import most_restrictive
from gpuwarden.domain.schedule.model import Window
from gpuwarden.domain.schedule.planning import open_windows

__all__ = ["NodePoolDesired", "desired_nodepool_state"]


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
    decider = most_restrictive(opened)
    limits = [occurrence.window.gpu_limit for occurrence in opened if occurrence.window.gpu_limit is not None]
    return NodePoolDesired(
        budgets=[{"nodes": str(decider.window.max_disruptions)}],
        gpu_limit=min(limits, default=None),
        windows=tuple(occurrence.name for occurrence in opened),
        reason=f"window {decider.name!r} {decider.describe()} allows {decider.window.max_disruptions}",
    )
