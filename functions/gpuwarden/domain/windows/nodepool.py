"""What the open windows write on a Karpenter NodePool, never looser than what its owner set.

Two fields are managed: ``spec.disruption.budgets`` and ``spec.limits["nvidia.com/gpu"]``.

- The windows' budget is ADDED to the pool's own budgets. Karpenter applies the most
  restrictive active budget (for each disruption reason, the minimum over the budgets active
  now), so every budget of the owner — its schedules, reasons and limits — keeps working and
  the result can only be tighter. A pool without budgets has Karpenter's default
  ``[{"nodes": "10%"}]`` (the CRD's default), which is kept beside the window's in the same
  way. Karpenter accepts at most 50 budgets: a pool that already has 50 keeps its own only.
- The windows' ``gpu_limit`` is written only where it is LOWER than the pool's own GPU limit
  (quantities compared as numbers: "1k" > "16"); a pool without one gets it. A pool whose
  own limit does not read as a quantity keeps it.
- A static NodePool (``spec.replicas`` set) gets the budget but never a GPU cap: Karpenter
  accepts only ``limits.nodes`` there.
- While a window is open the originals are kept (``PoolFields``, saved by the caller) and,
  when none is open any more, they come back exactly: a field that was absent is absent
  again, and a pool that had no ``spec.limits`` has none again.
- What the owner edits in their own part while a window is open (their budgets, in front of
  the window's; the GPU limit) is theirs: kept under the window, and what comes back after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwarden.domain.annotations import SAVED_BUDGETS
from gpuwarden.domain.quantity import parse_quantity
from gpuwarden.domain.views import GPU_RESOURCE
from gpuwarden.domain.windows.allowance import most_restrictive
from gpuwarden.domain.windows.model import Window
from gpuwarden.domain.windows.planning import open_windows

__all__ = [
    "BUDGETS_FIELD",
    "DEFAULT_BUDGETS",
    "GPU_FIELD",
    "GPU_RESOURCE",
    "LIMITS_FIELD",
    "MAX_BUDGETS",
    "NodePoolDesired",
    "NodePoolPlan",
    "PoolFields",
    "changed_fields",
    "desired_nodepool_state",
    "nodepool_patch",
    "owner_fields",
    "plan_nodepool",
]

BUDGETS_FIELD = "spec.disruption.budgets"
GPU_FIELD = f'spec.limits["{GPU_RESOURCE}"]'
LIMITS_FIELD = "spec.limits"
#: Karpenter's CRD: ``budgets`` defaults to this and holds at most ``MAX_BUDGETS`` items.
DEFAULT_BUDGETS: tuple[dict[str, str], ...] = ({"nodes": "10%"},)
MAX_BUDGETS = 50


@dataclass(frozen=True)
class NodePoolDesired:
    """What the windows open for a NodePool ask of it now.

    ``budgets``: the budgets the windows add (the most restrictive open window's
    ``max_disruptions``), or None: no window open, restore the originals. ``gpu_limit``: the
    lowest ``gpu_limit`` of the open windows, or None: no cap asked.
    """

    budgets: list[dict[str, str]] | None
    gpu_limit: int | None
    windows: tuple[str, ...]
    reason: str


def desired_nodepool_state(windows: Sequence[Window], now: datetime, nodepool: str) -> NodePoolDesired:
    """The disruption budget and GPU cap the windows want on ``nodepool`` at ``now``."""
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


@dataclass(frozen=True)
class PoolFields:
    """The managed fields of a NodePool as JSON values (None: absent); ``limits``: whether
    ``spec.limits`` is there at all.

    A saved copy (the owner's values while a window is open) also records what gpuwarden
    wrote on top of them: ``added``, the budgets after the owner's, and ``wrote_gpu``, the GPU
    cap (None: none). An edit the owner makes to their own part while a window is open is
    theirs: it is kept, and it is what comes back when the windows close."""

    budgets: Any
    gpu_limit: Any
    limits: bool = True
    added: list[Any] | None = None
    wrote_gpu: Any = None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> PoolFields:
        limits = spec.get("limits")
        return cls(
            budgets=(spec.get("disruption") or {}).get("budgets"),
            gpu_limit=(limits or {}).get(GPU_RESOURCE),
            limits=limits is not None,
        )

    def fields(self) -> PoolFields:
        """The fields alone (no record of what gpuwarden wrote)."""
        return PoolFields(self.budgets, self.gpu_limit, self.limits)

    def as_json(self) -> str:
        """JSON keeping the fields' own key order, so that they come back byte for byte."""
        saved = {"budgets": self.budgets, "gpu_limit": self.gpu_limit, "limits": self.limits}
        if self.added is not None:
            saved |= {"added": self.added, "wrote_gpu": self.wrote_gpu}
        return json.dumps(saved)

    @classmethod
    def from_json(cls, raw: str) -> PoolFields:
        """Raises ValueError, KeyError or TypeError when ``raw`` is not what ``as_json`` wrote.
        (A copy saved before ``limits`` was recorded reads as "limits present"; one saved
        before ``added`` was recorded never adopts an edit.)"""
        saved = json.loads(raw)
        added = saved.get("added")
        if added is not None and not isinstance(added, list):
            raise TypeError(f"added is {type(added).__name__}, not a list")
        return cls(
            budgets=saved["budgets"],
            gpu_limit=saved["gpu_limit"],
            limits=bool(saved.get("limits", True)),
            added=added,
            wrote_gpu=saved.get("wrote_gpu"),
        )


def _own_budgets(budgets: Any) -> list[Any]:
    return list(budgets) if isinstance(budgets, list) else [dict(b) for b in DEFAULT_BUDGETS]


def owner_fields(saved: PoolFields, current: PoolFields) -> PoolFields:
    """The owner's values now: the saved ones, or the owner's own edits made while a window
    was open — budgets that still end with what gpuwarden added (that suffix dropped), or
    budgets without it (taken whole); a GPU limit other than the one gpuwarden wrote."""
    if saved.added is None:  # saved by an older gpuwarden: nothing recorded to tell edits apart
        return saved.fields()
    budgets = saved.budgets
    now = current.budgets
    if isinstance(now, list) and now != _own_budgets(saved.budgets) + saved.added:
        cut = len(saved.added)
        own = now[: len(now) - cut] if cut and now[len(now) - cut :] == saved.added else now
        budgets = saved.budgets if own == _own_budgets(saved.budgets) else own
    gpu, limits = saved.gpu_limit, saved.limits
    expected = saved.wrote_gpu if saved.wrote_gpu is not None else saved.gpu_limit
    if current.gpu_limit != expected:
        gpu, limits = current.gpu_limit, current.limits
    return PoolFields(budgets, gpu, limits)


@dataclass(frozen=True)
class NodePoolPlan:
    """What the pool should carry now (``target``), the originals to keep saved (``keep``,
    None: nothing saved), and every part of the windows' wish left out, with why (``skipped``)."""

    target: PoolFields
    keep: PoolFields | None
    windows: tuple[str, ...]
    reason: str
    skipped: tuple[str, ...] = field(default_factory=tuple)


def _with_window_budgets(original: Any, added: list[dict[str, str]]) -> tuple[Any, str | None]:
    own = list(original) if isinstance(original, list) else [dict(b) for b in DEFAULT_BUDGETS]
    if len(own) + len(added) > MAX_BUDGETS:
        return original, (
            f"{BUDGETS_FIELD}: the pool has {len(own)} budgets of its own, Karpenter allows {MAX_BUDGETS}; "
            "the window's budget is not added"
        )
    return own + added, None


def _gpu_cap(original: PoolFields, cap: int, static: bool) -> tuple[Any, bool, str | None]:
    """(the GPU limit to carry, whether spec.limits is there, why the cap was not written)."""
    keep = (original.gpu_limit, original.limits)
    if static:
        return *keep, f"{GPU_FIELD}: static NodePool (spec.replicas): Karpenter accepts only limits.nodes there"
    if original.gpu_limit is None:
        return str(cap), True, None
    own = parse_quantity(original.gpu_limit)
    if own is None:
        return *keep, f"{GPU_FIELD}: the pool's own limit {original.gpu_limit!r} is not a quantity; kept"
    if cap >= own:
        return *keep, f"{GPU_FIELD}: the window's cap {cap} is not lower than the pool's own {original.gpu_limit}; kept"
    return str(cap), True, None


def plan_nodepool(
    desired: NodePoolDesired, current: PoolFields, saved: PoolFields | None, *, static: bool
) -> NodePoolPlan:
    """Pure: from the windows' wish, the pool's fields now and the originals saved (if any)."""
    original = owner_fields(saved, current) if saved is not None else current.fields()
    if desired.budgets is None:  # no window open: the owner's values come back
        return NodePoolPlan(target=original, keep=None, windows=desired.windows, reason=desired.reason)
    skipped: list[str] = []
    budgets, why = _with_window_budgets(original.budgets, desired.budgets)
    if why is not None:
        skipped.append(why)
    gpu, limits = original.gpu_limit, original.limits
    if desired.gpu_limit is not None:
        gpu, limits, why = _gpu_cap(original, desired.gpu_limit, static)
        if why is not None:
            skipped.append(why)
    added = budgets[len(_own_budgets(original.budgets)) :] if budgets != original.budgets else []
    wrote_gpu = gpu if gpu != original.gpu_limit else None
    return NodePoolPlan(
        target=PoolFields(budgets=budgets, gpu_limit=gpu, limits=limits),
        keep=PoolFields(original.budgets, original.gpu_limit, original.limits, added=added, wrote_gpu=wrote_gpu),
        windows=desired.windows,
        reason=desired.reason,
        skipped=tuple(skipped),
    )


def _limits_patch(spec: Mapping[str, Any], current: PoolFields, target: PoolFields) -> Any:
    """The merge patch of ``spec.limits``: the GPU key set or removed, and the whole object
    removed when the original had none and nothing but the GPU key is left in it."""
    others = {k: v for k, v in (spec.get("limits") or {}).items() if k != GPU_RESOURCE}
    if not target.limits and not others and current.limits:
        return None
    return {GPU_RESOURCE: target.gpu_limit}


def nodepool_patch(spec: Mapping[str, Any], plan: NodePoolPlan, saved: PoolFields | None) -> dict[str, Any] | None:
    """The JSON merge patch taking a pool with ``spec`` (and ``saved`` originals in its
    annotation) to ``plan``, or None when it is in step. Lists replace whole; ``null`` removes;
    a field left alone is not in the patch, so no empty parent object appears. The saved
    originals always ride along (``null``: nothing saved any more)."""
    current = PoolFields.of(spec)
    target = plan.target
    patch_spec: dict[str, Any] = {}
    if current.budgets != target.budgets:
        patch_spec["disruption"] = {"budgets": target.budgets}
    if (current.gpu_limit, current.limits) != (target.gpu_limit, target.limits):
        patch_spec["limits"] = _limits_patch(spec, current, target)
    keep = plan.keep.as_json() if plan.keep else None
    if not patch_spec and (saved.as_json() if saved else None) == keep:
        return None
    patch: dict[str, Any] = {"metadata": {"annotations": {SAVED_BUDGETS: keep}}}
    if patch_spec:
        patch["spec"] = patch_spec
    return patch


def changed_fields(current: PoolFields, target: PoolFields) -> list[tuple[str, Any, Any]]:
    """(field, was, now) for each managed field that differs."""
    found = []
    if current.budgets != target.budgets:
        found.append((BUDGETS_FIELD, current.budgets, target.budgets))
    if current.gpu_limit != target.gpu_limit:
        found.append((GPU_FIELD, current.gpu_limit, target.gpu_limit))
    elif current.limits != target.limits:
        found.append((LIMITS_FIELD, "present" if current.limits else None, "present" if target.limits else None))
    return found
