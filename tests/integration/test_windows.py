"""Budget windows (docs/windows.md) through the real services, against the simulator + moto.

Window decisions use a fixed window clock (as GPUWARDEN_NOW does); the simulator's clock
keeps driving the drains.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch, handle_tick
from sim.builders import gpu_node, nodepool
from tests.integration.conftest import EVENTS, World, load_event, types
from tests.integration.scenarios import spot_node
from tests.integration.window_clock import GPU_CAP, MORNING_0630, NIGHT, NIGHT_2230, at, run_cli

OTHER_NODE = "ip-10-0-2-40.us-west-2.compute.internal"
OTHER_INSTANCE = "i-0fedcba9876543210"
FREEZE = {
    "name": "business-hours-freeze",
    "schedule": "0 9 * * MON-FRI",
    "timezone": "Asia/Seoul",
    "duration": "10h",
    "max_disruptions": 0,
}
MONDAY_10_KST = datetime(2026, 6, 1, 1, 0, tzinfo=UTC)


def policy(*windows: dict[str, Any], drain: bool = True) -> Policy:
    return POLICY.model_validate(
        {"cluster": "ml-prod", "windows": list(windows), "rebalance": {"action": "drain" if drain else "prepare"}}
    )


def rebalance(instance_id: str, event_id: str) -> dict[str, Any]:
    return load_event(
        "rebalance-recommendation.json",
        id=event_id,
        resources=[f"arn:aws:ec2:us-west-2:123456789012:instance/{instance_id}"],
        detail={"instance-id": instance_id},
    )


def tick(action: str, window: str | None = None) -> Any:
    raw: dict[str, Any] = {"gpuwarden": "budget-window", "action": action}
    if window:
        raw["window"] = window
    return parse_scheduler_tick(raw)


# --------------------------------------------------------------------------- enforcement


def test_freeze_refuses_a_voluntary_drain_and_names_the_window(world: World) -> None:
    # Given a business-hours freeze and a policy that drains on rebalance, at 10:00 KST on a Monday
    scenario = spot_node(world.sim, modes=("annotate",), inference=0, pdb_min_available=None)
    deps = at(world, MONDAY_10_KST, policy(FREEZE, NIGHT))
    # When a rebalance recommendation arrives
    result = handle_batch(parse_notices(rebalance(scenario.instance_id, "rb-1")), deps).to_json()
    # Then the node is prepared but not drained, and the refusal names the window (most restrictive wins)
    refused = [a for a in result["actions"] if a["type"] == "refused"]
    assert len(refused) == 1
    assert "'business-hours-freeze'" in refused[0]["reason"]
    assert "freezes voluntary disruption" in refused[0]["reason"]
    assert "'business-hours-freeze'" in result["reason"]
    assert "evict" not in types(result)
    assert world.pod(scenario.trainers["annotate"]) is not None
    assert world.node(scenario.node)["spec"]["unschedulable"] is True


def test_open_window_with_one_disruption_allows_one_of_two_drains(world: World) -> None:
    # Given night-cap (max 1) open, and inference pods whose PDB keeps a drain in progress
    scenario = spot_node(world.sim, modes=(), inference=2, pdb_min_available="100%")
    started: list[dict[str, Any]] = []
    deps = at(world, NIGHT_2230, policy(FREEZE, NIGHT))
    deps.start_drain = started.append  # deployed: the Step Functions loop carries the drain on
    # When two rebalance recommendations arrive for two nodes of the same NodePool
    first = handle_batch(parse_notices(rebalance(scenario.instance_id, "rb-a")), deps, drain_locally=False)
    second = handle_batch(parse_notices(rebalance(OTHER_INSTANCE, "rb-b")), deps, drain_locally=False)
    # Then the first drains (still in progress), the second is refused by the window, by name
    assert "refused" not in types(first.to_json())
    assert [s["node"] for s in started] == [scenario.node]
    refused = [a for a in second.to_json()["actions"] if a["type"] == "refused"]
    assert len(refused) == 1
    assert "window 'night-cap'" in refused[0]["reason"]
    assert "allows 1, 1 in progress: 0 more" in refused[0]["reason"]
    assert "evict" not in types(second.to_json())


def test_a_drained_node_no_longer_counts_against_the_window(world: World) -> None:
    # Given night-cap (max 1) and a first rebalance drained to the end
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    deps = at(world, NIGHT_2230, policy(NIGHT))
    first = handle_batch(parse_notices(rebalance(scenario.instance_id, "rb-a")), deps).to_json()
    assert first["drain"]["outcome"] == "drained"
    # When a second node's recommendation arrives
    second = handle_batch(parse_notices(rebalance(OTHER_INSTANCE, "rb-b")), deps).to_json()
    # Then it is allowed: the first disruption is over
    assert "refused" not in types(second)
    assert second["drain"]["outcome"] == "drained"


def test_spot_interruption_never_waits_for_a_freeze(world: World) -> None:
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    deps = at(world, MONDAY_10_KST, policy(FREEZE))
    event = load_event("spot-interruption.json", time=world.sim.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"))
    result = handle_batch(parse_notices(event), deps).to_json()
    assert "refused" not in types(result)
    assert result["drain"]["outcome"] == "drained"
    assert world.pod(scenario.inference[0]) is None


# --------------------------------------------------------------------------- NodePools in step


def two_pools(world: World) -> tuple[dict[str, Any], dict[str, Any]]:
    training = world.sim.create(nodepool("gpu-training"))
    inference = world.sim.create(nodepool("inference", gpu_limit=None, budgets=[{"nodes": "1", "reasons": ["Empty"]}]))
    return copy.deepcopy(training["spec"]), copy.deepcopy(inference["spec"])


def pool(world: World, name: str) -> dict[str, Any]:
    found = world.sim.get("NodePool", name)
    assert found is not None
    return found


def test_open_writes_budgets_and_gpu_cap_and_close_restores_them_exactly(world: World) -> None:
    # Given two NodePools, one without a GPU limit
    training_spec, inference_spec = two_pools(world)
    p = policy(GPU_CAP)
    # When the night window opens (the sample Scheduler input)
    opened = handle_tick(parse_scheduler_tick(load_event("scheduler-window-open.json")), at(world, NIGHT_2230, p))
    # Then both pools carry the window's budget and GPU cap, with the originals saved on them
    assert opened.outcome == "handled", opened.reason
    own = {"gpu-training": training_spec, "inference": inference_spec}
    for name in ("gpu-training", "inference"):
        spec = pool(world, name)["spec"]
        assert spec["disruption"]["budgets"] == [*own[name]["disruption"]["budgets"], {"nodes": "2"}]
        assert spec["limits"]["nvidia.com/gpu"] == "8"
        assert "gpuwarden.io/saved-budgets" in pool(world, name)["metadata"]["annotations"]
    assert {(a["nodepool"], a["field"]) for a in opened.actions} == {
        ("gpu-training", "spec.disruption.budgets"),
        ("gpu-training", 'spec.limits["nvidia.com/gpu"]'),
        ("inference", "spec.disruption.budgets"),
        ("inference", 'spec.limits["nvidia.com/gpu"]'),
    }
    # When it closes
    closed = handle_tick(tick("close", "night-cap"), at(world, MORNING_0630, p))
    # Then each spec is exactly what it was (an absent limit is absent again), the saved copy is gone
    assert closed.outcome == "handled", closed.reason
    assert pool(world, "gpu-training")["spec"] == training_spec
    assert pool(world, "inference")["spec"] == inference_spec
    assert "nvidia.com/gpu" not in pool(world, "inference")["spec"]["limits"]
    for name in ("gpu-training", "inference"):
        assert "gpuwarden.io/saved-budgets" not in (pool(world, name)["metadata"].get("annotations") or {})
    # And the ledger mirrors the saved state
    assert world.ledger.get("nodepool#gpu-training") is not None


def test_open_twice_saves_the_originals_once(world: World) -> None:
    training_spec, _ = two_pools(world)
    p = policy(GPU_CAP)
    handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, p))
    again = handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, p))
    assert again.actions == []
    assert "every NodePool in step" in again.reason
    handle_tick(tick("close", "night-cap"), at(world, MORNING_0630, p))
    assert pool(world, "gpu-training")["spec"] == training_spec


def test_window_with_nodepools_touches_only_its_pools(world: World) -> None:
    _, inference_spec = two_pools(world)
    p = policy({**GPU_CAP, "nodepools": ["gpu-training"]})
    handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, p))
    assert pool(world, "gpu-training")["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}, {"nodes": "2"}]
    assert pool(world, "inference")["spec"] == inference_spec


def test_reconcile_repairs_a_hand_edited_nodepool_and_reports_the_drift(world: World) -> None:
    # Given the window open and written
    two_pools(world)
    p = policy(GPU_CAP)
    handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, p))
    # When someone replaces the budgets by hand (the window's one with them), and the periodic reconcile runs
    world.sim.patch_direct("NodePool", "gpu-training", {"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}})
    result = handle_tick(tick("reconcile"), at(world, NIGHT_2230.replace(minute=35), p))
    # Then the hand-written budget is the owner's own now (contract §4: a window never loosens what the
    # owner set, so their edit is kept), the window's budget is back beside it, and the drift is
    # reported: which pool, which field, was → now
    assert pool(world, "gpu-training")["spec"]["disruption"]["budgets"] == [{"nodes": "100%"}, {"nodes": "2"}]
    assert result.actions == [
        {
            "type": "nodepool-drift",
            "at": result.actions[0]["at"],
            "nodepool": "gpu-training",
            "field": "spec.disruption.budgets",
            "was": [{"nodes": "100%"}],
            "now": [{"nodes": "100%"}, {"nodes": "2"}],
            "reason": result.actions[0]["reason"],
        }
    ]
    assert "drift repaired: gpu-training spec.disruption.budgets" in result.reason
    # And a second reconcile finds nothing to do
    assert handle_tick(tick("reconcile"), at(world, NIGHT_2230, p)).actions == []
    # And when the window closes, the owner's latest budgets come back, not the ones saved at the open
    handle_tick(tick("close", "night-cap"), at(world, MORNING_0630, p))
    assert pool(world, "gpu-training")["spec"]["disruption"]["budgets"] == [{"nodes": "100%"}]


def test_an_owner_who_tightens_a_pool_while_a_window_is_open_keeps_it_tight_after(world: World) -> None:
    # Given the night-cap open on gpu-training (own budget 10%, own GPU limit 64, capped to 8)
    two_pools(world)
    p = policy(GPU_CAP)
    handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, p))
    # When its owner freezes it and lowers its GPU limit below the cap, keeping the window's budget
    edit = {"spec": {"disruption": {"budgets": [{"nodes": "0"}, {"nodes": "2"}]}, "limits": {"nvidia.com/gpu": "4"}}}
    world.sim.patch_direct("NodePool", "gpu-training", edit)
    handle_tick(tick("reconcile"), at(world, NIGHT_2230.replace(minute=35), p))
    # Then the reconcile keeps the owner's values (the cap of 8 is not lower than 4)
    spec = pool(world, "gpu-training")["spec"]
    assert spec["disruption"]["budgets"] == [{"nodes": "0"}, {"nodes": "2"}]
    assert spec["limits"]["nvidia.com/gpu"] == "4"
    # And when the window closes, the owner's latest values stay: nothing is loosened back
    handle_tick(tick("close", "night-cap"), at(world, MORNING_0630, p))
    spec = pool(world, "gpu-training")["spec"]
    assert spec["disruption"]["budgets"] == [{"nodes": "0"}]
    assert spec["limits"]["nvidia.com/gpu"] == "4"


def test_reconcile_opens_a_window_whose_schedule_was_missed(world: World) -> None:
    training_spec, _ = two_pools(world)
    p = policy(GPU_CAP)
    # no open tick arrived; the 5-minute reconcile finds the window open
    result = handle_tick(tick("reconcile"), at(world, NIGHT_2230, p))
    assert "nodepool-drift" in types(result.to_json())
    assert pool(world, "gpu-training")["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}, {"nodes": "2"}]
    # and the one after the (missed) close restores
    handle_tick(tick("reconcile"), at(world, MORNING_0630, p))
    assert pool(world, "gpu-training")["spec"] == training_spec


def test_a_tick_for_a_window_no_longer_in_the_policy_is_ignored(world: World) -> None:
    two_pools(world)
    result = handle_tick(tick("open", "retired-window"), at(world, NIGHT_2230, policy(GPU_CAP)))
    assert result.outcome == "ignored"
    assert "'retired-window'" in result.reason


def test_dry_run_writes_nothing_to_nodepools(world: World) -> None:
    training_spec, _ = two_pools(world)
    deps = world.deps(policy(GPU_CAP), dry_run=True)
    deps.window_clock = lambda: NIGHT_2230
    result = handle_tick(tick("open", "night-cap"), deps)
    assert result.outcome == "dry-run"
    assert "nodepool-set" in types(result.to_json())
    assert pool(world, "gpu-training")["spec"] == training_spec


# --------------------------------------------------------------------------- the CLI


def invoke(world: World, tmp_path: Path, now: str, event: Path) -> dict[str, Any]:
    code, answer = run_cli(world, tmp_path, now, event)
    assert code == 0, answer
    return answer


def test_cli_invoke_of_a_window_tick_decides_at_gpuwarden_now(world: World, tmp_path: Path) -> None:
    # Given a NodePool and the night window
    training_spec, _ = two_pools(world)
    event = EVENTS / "scheduler-window-open.json"
    # When the open tick is invoked with GPUWARDEN_NOW at noon: the window is not open, nothing changes
    noon = invoke(world, tmp_path, "2026-06-01T12:00:00Z", event)
    assert noon["outcome"] == "handled"
    assert "every NodePool in step" in noon["reason"]
    assert pool(world, "gpu-training")["spec"] == training_spec
    # When it is invoked with GPUWARDEN_NOW inside the window: the budgets are written
    night = invoke(world, tmp_path, "2026-06-01T22:00:30Z", event)
    assert night["outcome"] == "handled"
    assert pool(world, "gpu-training")["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}, {"nodes": "2"}]
    assert "2026-06-01T22:00:30Z" in night["reason"]


def test_a_window_over_every_pool_caps_disruptions_across_pools(world: World) -> None:
    # Given night-cap (max 1, all NodePools) and a drain in progress in gpu-training
    scenario = spot_node(world.sim, modes=(), inference=2, pdb_min_available="100%")
    world.sim.create(nodepool("gpu-batch"))
    world.sim.create(gpu_node("ip-10-0-3-50.us-west-2.compute.internal", "i-0aaaabbbbccccdddd", nodepool="gpu-batch"))
    deps = at(world, NIGHT_2230, policy(NIGHT))
    deps.start_drain = lambda state: None
    handle_batch(parse_notices(rebalance(scenario.instance_id, "rb-a")), deps, drain_locally=False)
    # When a node of another pool gets a rebalance recommendation
    other = handle_batch(parse_notices(rebalance("i-0aaaabbbbccccdddd", "rb-c")), deps, drain_locally=False).to_json()
    # Then the same window refuses it: its cap counts what it covers, not one pool
    refused = [a for a in other["actions"] if a["type"] == "refused"]
    assert len(refused) == 1
    assert "window 'night-cap' allows 1, 1 in progress" in refused[0]["reason"]


def test_a_nodepool_without_limits_gets_no_empty_limits_object(world: World) -> None:
    # Given a NodePool with no spec.limits at all, and a window without a GPU cap
    bare = nodepool("bare")
    del bare["spec"]["limits"]
    original = copy.deepcopy(world.sim.create(bare)["spec"])
    p = policy(NIGHT)
    # When the window opens and closes
    handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, p))
    assert "limits" not in pool(world, "bare")["spec"]
    handle_tick(tick("close", "night-cap"), at(world, MORNING_0630, p))
    # Then the spec is exactly what it was
    assert pool(world, "bare")["spec"] == original


def test_a_write_conflict_is_re_read_and_decided_again(world: World) -> None:
    # Given someone else's write lands between our read and our resourceVersion-checked patch
    training_spec, _ = two_pools(world)
    fault = world.sim.faults.inject(
        status=409, method="PATCH", path=r"/apis/karpenter.sh/v1/nodepools/gpu-training", count=1
    )
    # When the window opens
    result = handle_tick(tick("open", "night-cap"), at(world, NIGHT_2230, policy(GPU_CAP)))
    # Then the pool was re-read and written once in step, its originals saved
    assert fault.hits == 1
    assert result.outcome == "handled"
    assert pool(world, "gpu-training")["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}, {"nodes": "2"}]
    handle_tick(tick("close", "night-cap"), at(world, MORNING_0630, policy(GPU_CAP)))
    assert pool(world, "gpu-training")["spec"] == training_spec
