"""Budget windows on a mixed set of NodePools, through `gpuwarden invoke` against the simulator
(which admits NodePools as kube-apiserver does with Karpenter's CRDs): every pool is reconciled
on its own, none is loosened, a refused write is reported and stops nothing, the restore is exact."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_scheduler_tick
from gpuwarden.services.dispatch import handle_tick
from sim.builders import nodepool
from tests.integration.conftest import EVENTS, World
from tests.integration.window_clock import GPU_CAP, MORNING_0630, NIGHT_2230, at, run_cli

NIGHT_CAP = GPU_CAP  # 22:00-06:00 UTC, 2 disruptions, GPU cap 8
OWNER_FROZEN: list[dict[str, Any]] = [
    {"nodes": "0"},
    {"nodes": "1", "reasons": ["Drifted"]},
    {"nodes": "0", "schedule": "0 1 * * *", "duration": "23h"},
]
#: Everything allowed but patching the NodePool "locked" (a real 403 from the simulator's authorizer).
ALL_BUT_LOCKED = [
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["patch"], "resourceNames": ["gpu-training", "frozen", "static"]},
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["patch"]},
]


def mixed_pools(world: World) -> dict[str, dict[str, Any]]:
    """gpu-training (10%, 64 GPUs), frozen (the owner's "0" budgets, 4 GPUs), static (replicas,
    limits.nodes only), locked (gpuwarden may not patch it). Returns each spec as stored."""
    static = nodepool("static", gpu_limit=None)
    static["spec"]["replicas"] = 2
    static["spec"]["limits"] = {"nodes": "4"}
    pools = [nodepool("gpu-training"), nodepool("frozen", gpu_limit=4, budgets=OWNER_FROZEN), static]
    pools.append(nodepool("locked"))
    return {p["metadata"]["name"]: copy.deepcopy(world.sim.create(p)["spec"]) for p in pools}


def invoke(world: World, tmp_path: Path, now: str, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps(event))
    return run_cli(world, tmp_path, now, event_file)


def spec_of(world: World, name: str) -> dict[str, Any]:
    found = world.sim.get("NodePool", name)
    assert found is not None
    spec: dict[str, Any] = found["spec"]
    return spec


def pool_events(world: World, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in world.sim.list("Event", "default")
        if e["involvedObject"].get("kind") == "NodePool" and e["involvedObject"]["name"] == name
    ]


def test_a_window_over_a_mixed_set_of_pools_reports_each_and_never_loosens_one(world: World, tmp_path: Path) -> None:
    # Given four pools, one of which gpuwarden is not allowed to patch
    own = mixed_pools(world)
    world.sim.authorizer.restrict_to(ALL_BUT_LOCKED)
    opening = json.loads((EVENTS / "scheduler-window-open.json").read_text())
    # When the night-cap window opens (the Scheduler's payload, through gpuwarden invoke)
    code, result = invoke(world, tmp_path, "2026-06-01T22:00:30Z", opening)
    # Then the refused pool fails the tick (exit 1) but every other pool was written
    assert code == 1, result
    assert result["outcome"] == "failed"
    by_pool = {entry["nodepool"]: entry for entry in result["nodepools"]}
    assert {name: entry["outcome"] for name, entry in by_pool.items()} == {
        "frozen": "written",
        "gpu-training": "written",
        "locked": "failed",
        "static": "written",
    }
    assert "403" in by_pool["locked"]["reason"]
    assert "locked: " in result["reason"]
    # And each pool keeps its own budgets, with the window's beside them
    for name in ("gpu-training", "frozen", "static"):
        assert spec_of(world, name)["disruption"]["budgets"] == [*own[name]["disruption"]["budgets"], {"nodes": "2"}]
    # And the GPU cap is written only where lower, never on the static pool, and the skips say why
    assert spec_of(world, "gpu-training")["limits"]["nvidia.com/gpu"] == "8"
    assert spec_of(world, "frozen")["limits"] == own["frozen"]["limits"]
    assert spec_of(world, "static")["limits"] == {"nodes": "4"}
    assert "not lower than the pool's own 4" in by_pool["frozen"]["skipped"][0]
    assert "static NodePool" in by_pool["static"]["skipped"][0]
    assert spec_of(world, "locked") == own["locked"]
    # And the refusal is a Warning Event on the pool; the static pool's skip a Normal one
    [failed] = pool_events(world, "locked")
    assert (failed["reason"], failed["type"]) == ("NodePoolWriteFailed", "Warning")
    assert [e["reason"] for e in pool_events(world, "static")] == ["BudgetWindowCapSkipped"]
    assert {a["type"] for a in result["actions"]} == {"nodepool-set", "nodepool-skipped", "nodepool-failed"}

    # When the window has closed and the periodic reconcile runs (gpuwarden may patch every pool again)
    world.sim.authorizer.allow_all()
    closing = {"gpuwarden": "budget-window", "action": "reconcile"}
    code, result = invoke(world, tmp_path, "2026-06-02T06:30:00Z", closing)
    # Then every pool is exactly what its owner wrote
    assert code == 0, result
    assert result["outcome"] == "handled"
    for name, spec in own.items():
        assert spec_of(world, name) == spec, name


def test_a_pool_refused_with_422_is_reported_and_the_next_pool_is_still_written(world: World) -> None:
    # Given two pools, and an API server that refuses (422) every write to the first by name
    own = mixed_pools(world)
    fault = world.sim.faults.inject(status=422, method="PATCH", path=r"/apis/karpenter.sh/v1/nodepools/frozen")
    p = Policy.model_validate({"cluster": "ml-prod", "windows": [NIGHT_CAP]})
    # When the window opens
    result = handle_tick(
        parse_scheduler_tick({"gpuwarden": "budget-window", "action": "reconcile"}), at(world, NIGHT_2230, p)
    )
    # Then "frozen" is reported failed and the pools after it (by name) are written
    assert fault.hits >= 1
    outcomes = {entry["nodepool"]: entry["outcome"] for entry in result.nodepools or []}
    assert outcomes["frozen"] == "failed"
    assert outcomes["gpu-training"] == "written"
    assert outcomes["static"] == "written"
    assert spec_of(world, "frozen") == own["frozen"]
    fault.remove()
    # And once the server accepts again, the next reconcile converges, and the close restores all
    handle_tick(parse_scheduler_tick({"gpuwarden": "budget-window", "action": "reconcile"}), at(world, NIGHT_2230, p))
    assert spec_of(world, "frozen")["disruption"]["budgets"][-1] == {"nodes": "2"}
    closed = handle_tick(
        parse_scheduler_tick({"gpuwarden": "budget-window", "action": "reconcile"}), at(world, MORNING_0630, p)
    )
    assert closed.outcome == "handled"
    for name, spec in own.items():
        assert spec_of(world, name) == spec, name
