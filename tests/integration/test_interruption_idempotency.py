"""Re-deliveries, concurrent deliveries and a flaky API server: still one cordon, one replacement."""

from __future__ import annotations

import json
import threading
from typing import Any

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.apiserver.faults import RequestInfo
from tests.integration.conftest import World
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import spot_node

NODES_PATH = r"/api/v1/nodes/.*"
TAINT_KEY = "gpuwarden.io/disruption"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def spy_taint_writes(world: World) -> list[dict[str, Any]]:
    """Every node PATCH body that sets gpuwarden's taint, seen by a predicate that never faults."""
    seen: list[dict[str, Any]] = []

    def spy(req: RequestInfo) -> bool:
        body = json.loads(req.body or b"{}")
        taints = (body.get("spec") or {}).get("taints") or []
        if any(t.get("key") == TAINT_KEY for t in taints):
            seen.append(body)
        return False

    world.sim.faults.inject(status=500, method="PATCH", path=NODES_PATH, predicate=spy)
    return seen


def node_patches(world: World) -> list[Any]:
    return [r for r in world.sim.requests if r.method == "PATCH" and r.path.startswith("/api/v1/nodes/")]


def test_second_delivery_of_a_spot_warning_is_a_duplicate_that_writes_no_taint(world: World) -> None:
    # Given a Spot node that was handled once for this event
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None, grace=2)
    taint_writes = spy_taint_writes(world)
    event = spot_warning(world)
    first = handle_batch(parse_notices(event), world.deps()).to_json()
    assert first["outcome"] == "handled", first["reason"]
    world.sim.clear_requests()
    # When the same event is delivered again
    second = handle_batch(parse_notices(event), world.deps()).to_json()
    # Then it is a duplicate: one taint write in all, one NodeClaim, no write at all the second time
    assert second["outcome"] == "duplicate", second["reason"]
    assert second["node"] == scenario.node
    assert len(taint_writes) == 1
    assert len(world.sim.list("NodeClaim")) == 1
    assert "cordon" not in [a["type"] for a in second["actions"]]
    assert [f"{r.method} {r.path}" for r in world.sim.requests if r.method in WRITES] == []
    assert world.ledger.get(event["id"])["duplicates"] == 1  # type: ignore[index]


def test_two_concurrent_deliveries_handle_once_and_launch_one_nodeclaim(world: World) -> None:
    # Given a Spot node and the same warning delivered twice at the same moment
    spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None, grace=2)
    event = spot_warning(world)
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def deliver() -> None:
        deps = world.deps()  # each delivery its own client, as two Lambda containers would
        start.wait()
        try:
            results.append(handle_batch(parse_notices(event), deps).to_json())
        except BaseException as err:  # surfaced below
            errors.append(err)

    # When both run concurrently
    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Then exactly one handled it and the other saw a duplicate; one cordon, one NodeClaim
    assert not errors, errors
    assert sorted(r["outcome"] for r in results) == ["duplicate", "handled"]
    assert [a["type"] for r in results for a in r["actions"]].count("cordon") == 1
    assert [e["reason"] for e in world.sim.list("Event")].count("GpuwardenCordoned") == 1
    assert len(world.sim.list("NodeClaim")) == 1


def test_node_patch_that_fails_twice_with_503_still_cordons_once(world: World) -> None:
    # Given an API server that answers the first two node patches with 503
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None, grace=2)
    taint_writes = spy_taint_writes(world)
    unavailable = world.sim.faults.inject(status=503, method="PATCH", path=NODES_PATH, count=2)
    # When the Spot warning arrives
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    # Then the patch was retried: handled, one cordon action, the node tainted once
    assert result["outcome"] == "handled", result["reason"]
    assert unavailable.hits == 2
    assert [a["type"] for a in result["actions"]].count("cordon") == 1
    assert len(taint_writes) == 3  # two refused, the third applied
    assert world.node(scenario.node)["spec"]["unschedulable"] is True
    assert sum(1 for r in node_patches(world) if r.status == 200 and not r.fault) >= 1


def test_node_changed_between_read_and_write_is_reread_and_cordoned_once(world: World) -> None:
    # Given a node that someone else labels right before gpuwarden's first patch lands (stale resourceVersion)
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None, grace=2)
    changed: list[bool] = []

    def change_node_first(req: RequestInfo) -> bool:
        if not changed:
            changed.append(True)
            world.sim.patch_direct("Node", scenario.node, {"metadata": {"labels": {"team": "vision"}}})
        return False

    world.sim.faults.inject(status=500, method="PATCH", path=NODES_PATH, predicate=change_node_first)
    # When the Spot warning arrives
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    # Then the first write lost with 409, the node was re-read and cordoned once, keeping the label
    assert result["outcome"] == "handled", result["reason"]
    assert next(r.status for r in node_patches(world)) == 409
    assert [a["type"] for a in result["actions"]].count("cordon") == 1
    node = world.node(scenario.node)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["team"] == "vision"


def test_injected_409_on_the_first_node_patch_is_retried_as_a_conflict(world: World) -> None:
    # Given an API server that answers the first node patch with 409 Conflict
    scenario = spot_node(world.sim, modes=(), inference=1, pdb_min_available=None, grace=2)
    conflict = world.sim.faults.inject(status=409, method="PATCH", path=NODES_PATH, count=1)
    # When the Spot warning arrives
    result = handle_batch(parse_notices(spot_warning(world)), world.deps()).to_json()
    # Then it is handled with exactly one cordon
    assert conflict.hits == 1
    assert result["outcome"] == "handled", result["reason"]
    assert [a["type"] for a in result["actions"]].count("cordon") == 1
    assert world.node(scenario.node)["metadata"]["annotations"]["gpuwarden.io/kind"] == "spot-interruption"
