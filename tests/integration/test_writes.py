"""The one write primitive (services.writes) and release_node, against the simulator's API server."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.views import NodeView
from gpuwarden.services.engine.writes import CONFLICT_LIMIT, WriteConflicts, annotate, release_node, update_node
from sim.builders import gpu_node
from tests.integration.conftest import World
from tests.integration.scenarios import INSTANCE, NODE


def a_node(world: World) -> NodeView:
    world.sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    node = world.deps().kube.get_node(NODE)
    assert node is not None
    return node


def test_a_write_that_loses_a_race_is_decided_again_on_the_node_as_it_now_is(world: World) -> None:
    # Given a node read before someone else annotated it
    stale = a_node(world)
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": {"team": "ml"}}})
    seen: list[str | None] = []

    def decide(node: NodeView) -> dict[str, Any] | None:
        seen.append(node.annotations.get("team"))
        return annotate({ann.REPLACEMENT: "pending:e-1"})

    # When gpuwarden writes from its stale read
    written = update_node(world.deps().kube, stale, decide)
    # Then the first write met a 409, the decision ran again on the fresh node, and the write landed
    assert seen == [None, "ml"]
    assert written.written
    assert written.obj is not None
    assert written.obj.annotations[ann.REPLACEMENT] == "pending:e-1"
    assert world.node(NODE)["metadata"]["annotations"]["team"] == "ml"


def test_a_decision_of_nothing_writes_nothing(world: World) -> None:
    node = a_node(world)
    before = world.node(NODE)["metadata"]["resourceVersion"]
    written = update_node(world.deps().kube, node, lambda _: None)
    assert not written.written
    assert world.node(NODE)["metadata"]["resourceVersion"] == before


def test_a_node_that_keeps_changing_ends_the_write_with_write_conflicts(world: World) -> None:
    # Given a node someone else writes every time gpuwarden has decided
    node = a_node(world)
    attempts = 0

    def decide(current: NodeView) -> dict[str, Any]:
        nonlocal attempts
        attempts += 1
        world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": {"busy": str(attempts)}}})
        return annotate({ann.REPLACEMENT: "pending:e-1"})

    # When gpuwarden writes, Then it gives up after the package's one limit, with a typed 409
    with pytest.raises(WriteConflicts) as raised:
        update_node(world.deps().kube, node, decide)
    assert raised.value.status == 409
    assert attempts == CONFLICT_LIMIT
    assert ann.REPLACEMENT not in world.node(NODE)["metadata"]["annotations"]


def test_a_node_deleted_before_the_write_is_reported_gone(world: World) -> None:
    node = a_node(world)
    world.sim.delete_direct("Node", NODE)
    written = update_node(world.deps().kube, node, lambda _: annotate({ann.REPLACEMENT: "x"}))
    assert written.obj is None
    assert not written.written


def test_release_removes_only_what_the_disruption_set(world: World) -> None:
    # Given a node gpuwarden cordoned for a gpu-idle reclaim, which also holds a maintenance plan,
    # a replacement record and an operator's taint and label
    world.sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    marks = {
        ann.EVENT_ID: "idle-1",
        ann.KIND: "gpu-idle",
        ann.CORDONED_BY_US: "true",
        ann.CLAIMED_AT: "2026-11-22T10:00:00.000000Z",
        ann.MAINTENANCE_PLAN: "nightly@2026-11-23T02:00:00Z",
        ann.MAINTENANCE_PLAN_ID: "maint-1",
        ann.REPLACEMENT: "nodeclaim/gpu-1",
        "team": "ml",
    }
    taints = [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": ann.TAINT_KEY, "value": "gpu-idle", "effect": "NoSchedule"},
    ]
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": marks}, "spec": {"unschedulable": True}})
    world.sim.patch_direct("Node", NODE, {"spec": {"taints": taints}})
    # When the node is given back while that event holds it
    released = release_node(world.deps().kube, NODE, held_for="idle-1")
    # Then gpuwarden's taint, cordon and disruption annotations are gone; the rest stays
    assert released.written
    node = world.node(NODE)
    kept = node["metadata"]["annotations"]
    assert not [k for k in ann.DISRUPTION_MARKS if k in kept]
    assert kept[ann.MAINTENANCE_PLAN_ID] == "maint-1"
    assert kept[ann.REPLACEMENT] == "nodeclaim/gpu-1"
    assert kept["team"] == "ml"
    assert node["spec"]["taints"] == taints[:1]
    assert not node["spec"].get("unschedulable")


def test_release_leaves_a_node_another_event_holds_now(world: World) -> None:
    world.sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    held = {ann.EVENT_ID: "spot-1", ann.KIND: "spot-interruption", ann.CORDONED_BY_US: "true"}
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": held}, "spec": {"unschedulable": True}})
    released = release_node(world.deps().kube, NODE, held_for="idle-1")
    assert not released.written
    assert world.node(NODE)["spec"]["unschedulable"] is True
    assert world.node(NODE)["metadata"]["annotations"][ann.EVENT_ID] == "spot-1"
