"""Windows never loosen a NodePool: properties over generated pools and sets of open windows.

The pool goes through the whole life of a window the way the API server would see it: each
reconcile's JSON merge patch is applied with the simulator's RFC 7386 implementation.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwarden.domain.annotations import SAVED_BUDGETS
from gpuwarden.domain.quantity import parse_quantity
from gpuwarden.domain.windows import Window
from gpuwarden.domain.windows.nodepool import (
    DEFAULT_BUDGETS,
    GPU_RESOURCE,
    MAX_BUDGETS,
    PoolFields,
    desired_nodepool_state,
    nodepool_patch,
    plan_nodepool,
)
from sim.apiserver.patch import merge_patch

POOL = "gpu-training"
NOW = datetime(2026, 6, 1, 22, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)
REASONS = ("Underutilized", "Empty", "Drifted")
#: How many pools (each with a sequence of window sets) the main property is checked on.
EXAMPLES = 500

nodes_values = st.one_of(
    st.integers(0, 20).map(str),
    st.integers(0, 100).map(lambda p: f"{p}%"),
)
budget = st.builds(
    lambda nodes, reasons, scheduled: {
        "nodes": nodes,
        **({"reasons": reasons} if reasons else {}),
        **({"schedule": "0 9 * * mon-fri", "duration": "8h"} if scheduled else {}),
    },
    nodes_values,
    st.lists(st.sampled_from(REASONS), unique=True, max_size=3),
    st.booleans(),
)
gpu_quantity = st.one_of(
    st.integers(0, 2000),
    st.integers(0, 2000).map(str),
    st.sampled_from(["1k", "500m", "1.5", "2Ki", "1e2", "16", "8", "0"]),
)


@st.composite
def nodepools(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            }
        }
    }
    static = draw(st.booleans())
    if static:
        spec["replicas"] = draw(st.integers(0, 10))
    # The API server always defaults spec.disruption (Karpenter's CRD); budgets default too, but
    # an absent list is generated as well.
    spec["disruption"] = {"consolidateAfter": "0s"}
    if draw(st.booleans()):
        spec["disruption"]["budgets"] = draw(st.lists(budget, max_size=MAX_BUDGETS))
    limits = draw(st.sampled_from(["absent", "empty", "other", "gpu", "both"]))
    if limits != "absent":
        spec["limits"] = {}
        if limits in ("other", "both"):
            spec["limits"]["nodes" if static else "cpu"] = "1000"
        if limits in ("gpu", "both") and not static:
            spec["limits"][GPU_RESOURCE] = draw(gpu_quantity)
    meta: dict[str, Any] = {"name": POOL}
    if draw(st.booleans()):
        meta["annotations"] = {"team": "ml"}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": meta, "spec": spec}


window = st.builds(
    lambda i, max_disruptions, gpu_limit, covers: Window(
        name=f"w{i}",
        schedule="* * * * *",  # fires every minute: open whenever asked
        duration=HOUR,
        max_disruptions=max_disruptions,
        gpu_limit=gpu_limit,
        nodepools=None if covers else ["another-pool"],
    ),
    st.integers(0, 1000),
    st.integers(0, 20),
    st.one_of(st.none(), st.integers(0, 2000)),
    st.booleans(),
)
window_sets = st.lists(st.lists(window, max_size=3, unique_by=lambda w: w.name), min_size=1, max_size=3)


def reconcile(pool: dict[str, Any], windows: list[Window]) -> dict[str, Any]:
    """One reconcile of ``pool`` for ``windows``, applied as the API server applies a merge patch."""
    raw = (pool["metadata"].get("annotations") or {}).get(SAVED_BUDGETS)
    saved = PoolFields.from_json(raw) if raw is not None else None
    desired = desired_nodepool_state(windows, NOW, POOL)
    plan = plan_nodepool(desired, PoolFields.of(pool["spec"]), saved, static="replicas" in pool["spec"])
    patch = nodepool_patch(pool["spec"], plan, saved)
    return pool if patch is None else merge_patch(copy.deepcopy(pool), patch)


def allowed(budgets: list[dict[str, Any]], nodes: int, reason: str) -> int:
    """Karpenter's GetAllowedDisruptionsByReason with every budget active (percentages round up)."""
    found = math.inf
    for b in budgets:
        if "reasons" in b and reason not in b["reasons"]:
            continue
        value = b["nodes"]
        scaled = math.ceil(int(value[:-1]) * nodes / 100) if value.endswith("%") else int(value)
        found = min(found, scaled)
    return int(found) if found != math.inf else 1 << 31


def effective_budgets(spec: dict[str, Any]) -> list[dict[str, Any]]:
    budgets = (spec.get("disruption") or {}).get("budgets")
    return list(budgets) if budgets is not None else [dict(b) for b in DEFAULT_BUDGETS]


def without_managed(pool: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(pool)
    (out["spec"].get("disruption") or {}).pop("budgets", None)
    if out["spec"].get("limits") is not None:
        out["spec"]["limits"].pop(GPU_RESOURCE, None)
        if not out["spec"]["limits"]:
            out["spec"].pop("limits")
    annotations = out["metadata"].pop("annotations", {}) or {}
    annotations.pop(SAVED_BUDGETS, None)
    if annotations:
        out["metadata"]["annotations"] = annotations
    return out


def assert_at_least_as_restrictive(original: dict[str, Any], written: dict[str, Any]) -> None:
    own, now = effective_budgets(original["spec"]), effective_budgets(written["spec"])
    # every budget of the owner is still there, in place (schedules, reasons and all)
    assert now[: len(own)] == own
    assert len(now) <= MAX_BUDGETS
    for nodes in (0, 1, 3, 10, 57):
        for reason in REASONS:
            assert allowed(now, nodes, reason) <= allowed(own, nodes, reason)
    # the GPU limit is never raised and never removed; static pools' limits are never touched
    was = (original["spec"].get("limits") or {}).get(GPU_RESOURCE)
    gpu = (written["spec"].get("limits") or {}).get(GPU_RESOURCE)
    if "replicas" in original["spec"]:
        assert written["spec"].get("limits") == original["spec"].get("limits")
    if was is not None:
        own_limit, new_limit = parse_quantity(was), parse_quantity(gpu)
        assert own_limit is not None
        assert new_limit is not None
        assert new_limit <= own_limit
    # nothing else changes
    assert without_managed(written) == without_managed(original)


def same_metadata(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal, reading an empty annotations map as absent (the API server omits empty maps)."""

    def normal(pool: dict[str, Any]) -> dict[str, Any]:
        meta = dict(pool["metadata"])
        if not meta.get("annotations"):
            meta.pop("annotations", None)
        return meta

    return normal(a) == normal(b)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodepools(), window_sets)
def test_windows_never_loosen_a_nodepool_and_the_restore_is_exact(
    original: dict[str, Any], sequence: list[list[Window]]
) -> None:
    # Given any NodePool, and any sequence of sets of open windows
    pool = copy.deepcopy(original)
    for windows in sequence:
        # When the windows are reconciled onto it
        pool = reconcile(pool, windows)
        # Then it is at least as restrictive as its owner made it, on every field
        assert_at_least_as_restrictive(original, pool)
        # And a second reconcile changes nothing
        assert reconcile(pool, windows) == pool
    # When the last window closes
    restored = reconcile(pool, [])
    # Then the pool is exactly what it was: absent fields absent
    assert restored["spec"] == original["spec"]
    assert same_metadata(restored, original)


owner_edits = st.one_of(
    st.none(),
    st.tuples(st.just("budgets"), st.lists(budget, max_size=5)),
    st.tuples(st.just("gpu"), gpu_quantity),
)


def owner_edit(owner: dict[str, Any], pool: dict[str, Any], edit: Any) -> None:
    """The owner edits their own part of the pool (kubectl edit): their budgets, in front of
    whatever gpuwarden added after them, or the GPU limit. Applied to both views."""
    if edit is None:
        return
    what, value = edit
    if what == "budgets":
        suffix = (pool["spec"]["disruption"].get("budgets") or [])[len(effective_budgets(owner["spec"])) :]
        pool["spec"]["disruption"]["budgets"] = copy.deepcopy(value) + suffix
        owner["spec"]["disruption"]["budgets"] = copy.deepcopy(value)
    elif "replicas" not in owner["spec"]:
        if (pool["spec"].get("limits") or {}).get(GPU_RESOURCE) == value:
            return  # the value already shown: not an edit anyone can see
        for view in (owner, pool):
            view["spec"].setdefault("limits", {})[GPU_RESOURCE] = value


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodepools(), st.lists(st.tuples(st.lists(window, max_size=3, unique_by=lambda w: w.name), owner_edits), max_size=4)
)
def test_the_owners_edits_while_a_window_is_open_are_kept_and_come_back(
    original: dict[str, Any], steps: list[tuple[list[Window], Any]]
) -> None:
    # Given any NodePool, and a sequence of (open windows, an edit by the pool's owner)
    owner, pool = copy.deepcopy(original), copy.deepcopy(original)
    for windows, edit in steps:
        owner_edit(owner, pool, edit)
        # When the windows are reconciled
        pool = reconcile(pool, windows)
        # Then the pool is at least as restrictive as the owner has it now, and stable
        assert_at_least_as_restrictive(owner, pool)
        assert reconcile(pool, windows) == pool
    # And when the windows close, the owner's latest values come back exactly
    restored = reconcile(pool, [])
    assert restored["spec"] == owner["spec"]
    assert same_metadata(restored, owner)


def desired(max_disruptions: int, gpu_limit: int | None = None) -> Any:
    w = Window(name="w", schedule="* * * * *", duration=HOUR, max_disruptions=max_disruptions, gpu_limit=gpu_limit)
    return desired_nodepool_state([w], NOW, POOL)


def test_a_pool_frozen_by_its_owner_stays_frozen_under_a_looser_window() -> None:
    # Given a pool whose own budget is "0", and a window allowing 2
    current = PoolFields(budgets=[{"nodes": "0"}], gpu_limit="10")
    # When the plan is made
    plan = plan_nodepool(desired(2, gpu_limit=16), current, None, static=False)
    # Then the window's budget is added beside the owner's, and the lower GPU limit is kept
    assert plan.target.budgets == [{"nodes": "0"}, {"nodes": "2"}]
    assert plan.target.gpu_limit == "10"
    assert plan.skipped == (
        "spec.limits[\"nvidia.com/gpu\"]: the window's cap 16 is not lower than the pool's own 10; kept",
    )


def test_a_static_pool_gets_the_budget_and_no_gpu_cap_with_the_skip_reported() -> None:
    current = PoolFields(budgets=[{"nodes": "10%"}], gpu_limit=None, limits=False)
    plan = plan_nodepool(desired(1, gpu_limit=8), current, None, static=True)
    assert plan.target == PoolFields(budgets=[{"nodes": "10%"}, {"nodes": "1"}], gpu_limit=None, limits=False)
    assert len(plan.skipped) == 1
    assert "static NodePool" in plan.skipped[0]


def test_quantities_compare_as_numbers_not_text() -> None:
    # "1k" is a thousand GPUs: a cap of 16 is lower; "500m" is half a GPU: a cap of 1 is not
    assert plan_nodepool(desired(1, 16), PoolFields([], "1k"), None, static=False).target.gpu_limit == "16"
    assert plan_nodepool(desired(1, 1), PoolFields([], "500m"), None, static=False).target.gpu_limit == "500m"
    assert parse_quantity("2Ki") == Fraction(2048)


def test_a_pool_without_budgets_keeps_karpenters_default_beside_the_window() -> None:
    plan = plan_nodepool(desired(3), PoolFields(None, None, limits=False), None, static=False)
    assert plan.target.budgets == [{"nodes": "10%"}, {"nodes": "3"}]


def test_a_pool_with_fifty_budgets_keeps_its_own_and_says_so() -> None:
    own = [{"nodes": "1"}] * MAX_BUDGETS
    plan = plan_nodepool(desired(0), PoolFields(own, None, limits=False), None, static=False)
    assert plan.target.budgets == own
    assert "Karpenter allows 50" in plan.skipped[0]


def test_restoring_a_pool_that_had_no_limits_removes_the_limits_object() -> None:
    # Given a pool without spec.limits under a GPU-capped window
    pool: dict[str, Any] = {"metadata": {"name": POOL}, "spec": {"disruption": {"budgets": [{"nodes": "1"}]}}}
    w = Window(name="cap", schedule="* * * * *", duration=HOUR, max_disruptions=1, gpu_limit=8)
    capped = reconcile(copy.deepcopy(pool), [w])
    assert capped["spec"]["limits"] == {GPU_RESOURCE: "8"}
    # When the window closes, Then spec.limits is gone again (not an empty object)
    assert reconcile(capped, [])["spec"] == pool["spec"]
