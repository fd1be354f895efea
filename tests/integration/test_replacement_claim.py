"""The replacement's claim (docs/cluster.md): one RV-checked write on the node that already names the
NodeClaim (the mark itself, on the urgent path), that sees a taint Karpenter adds after the mark
when it is a write of its own, and that a redelivery resumes."""

from __future__ import annotations

from typing import Any

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.replacement import nodeclaim_name
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.node_ops import pods_on
from gpuwarden.services.engine.replace import ensure_replacement
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import NODE, spot_node

REPLACEMENT = "gpuwarden.io/replacement"


def _notice(world: World) -> Notice:
    return parse_notices(load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))).notices[0]


def _node_requests(world: World) -> list[str]:
    return [f"{r.method} {r.path}" for r in world.sim.requests if "/nodes" in r.path and "nodeclaims" not in r.path]


def test_a_taint_karpenter_adds_after_the_mark_stops_the_claim(world: World) -> None:
    # Given a Spot node as the mark left it, which Karpenter then taints karpenter.sh/disrupted
    spot_node(world.sim, inference=0, pdb_min_available=None)
    deps, notice = world.deps(), _notice(world)
    marked = deps.kube.get_node(NODE)
    assert marked is not None
    taints = world.node(NODE)["spec"].get("taints") or []
    disrupted = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
    world.sim.patch_direct("Node", NODE, {"spec": {"taints": [*taints, disrupted]}})
    # When the replacement step runs on the node as it was read before the taint
    recorder = Recorder(deps, notice.event_id)
    replaced = ensure_replacement(recorder, marked, notice, pods_on(deps.kube, NODE))
    # Then the RV-checked claim found the taint: no claim, no NodeClaim, left to Karpenter
    assert replaced.type is ActionType.REPLACEMENT_SKIPPED
    assert recorder.actions[-1]["left_to"] == "Karpenter"
    assert world.sim.list("NodeClaim") == []
    assert REPLACEMENT not in world.node(NODE)["metadata"]["annotations"]


def test_a_claim_whose_run_died_before_the_create_is_resumed_once(world: World) -> None:
    # Given a node whose claim names this event's NodeClaim, from a run killed before it created it
    spot_node(world.sim, inference=0, pdb_min_available=None)
    deps, notice = world.deps(), _notice(world)
    name = nodeclaim_name(notice.event_id, NODE)
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": {REPLACEMENT: f"nodeclaim/{name}"}}})
    # When the event is delivered again, twice
    node = deps.kube.get_node(NODE)
    assert node is not None
    first = ensure_replacement(Recorder(deps, notice.event_id), node, notice, pods_on(deps.kube, NODE))
    node = deps.kube.get_node(NODE)
    assert node is not None
    second = ensure_replacement(Recorder(deps, notice.event_id), node, notice, pods_on(deps.kube, NODE))
    # Then the first creates the NodeClaim its claim names, the second finds it and creates nothing
    assert (first.type, first.target) == (ActionType.REPLACEMENT, f"nodeclaim/{name}")
    assert second.type is ActionType.REPLACEMENT_SKIPPED
    assert [c["metadata"]["name"] for c in world.sim.list("NodeClaim")] == [name]
    assert world.node(NODE)["metadata"]["annotations"][REPLACEMENT] == f"nodeclaim/{name}"


def test_another_events_claim_is_never_taken_over(world: World) -> None:
    # Given a node another event has claimed a NodeClaim for
    spot_node(world.sim, inference=0, pdb_min_available=None)
    deps, notice = world.deps(), _notice(world)
    theirs = "nodeclaim/" + nodeclaim_name("another-event", NODE)
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": {REPLACEMENT: theirs}}})
    node = deps.kube.get_node(NODE)
    assert node is not None
    # When this event's replacement step runs
    replaced = ensure_replacement(Recorder(deps, notice.event_id), node, notice, pods_on(deps.kube, NODE))
    # Then it launches nothing and leaves the claim as it was
    assert replaced.type is ActionType.REPLACEMENT_SKIPPED
    assert world.sim.list("NodeClaim") == []
    assert world.node(NODE)["metadata"]["annotations"][REPLACEMENT] == theirs


def _spot_run(world: World) -> dict[str, Any]:
    deps = world.deps()
    deps.start_drain = lambda _state: None
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    return handle_batch(parse_notices(event), deps, drain_locally=False).to_json()


def test_the_urgent_path_finds_the_node_once_and_writes_it_once(world: World) -> None:
    # Given a Spot node in a NodePool, the drain handed to the workflow (as deployed)
    spot_node(world.sim)
    world.sim.clear_requests()
    # When the Spot warning is handled
    result = _spot_run(world)
    # Then the node was found by one LIST and written once: the mark, which also carries the
    # replacement's claim naming the NodeClaim (no claim write, no re-read, no record after it)
    assert result["outcome"] == "handled", result["reason"]
    assert any(a["type"] == "replacement" for a in result["actions"])
    # (found by a LIST, or by name where this process has seen the instance before: node_ops.find_node)
    found, *writes = _node_requests(world)
    assert found in ("GET /api/v1/nodes", f"GET /api/v1/nodes/{NODE}")
    assert writes == [f"PATCH /api/v1/nodes/{NODE}"]
    claim = f"nodeclaim/{nodeclaim_name(result['event_id'], NODE)}"
    assert world.node(NODE)["metadata"]["annotations"][REPLACEMENT] == claim
    assert [f"nodeclaim/{c['metadata']['name']}" for c in world.sim.list("NodeClaim")] == [claim]


def test_a_claim_on_the_node_before_the_mark_is_not_overwritten_by_it(world: World) -> None:
    # Given a node another event already claimed a NodeClaim for
    spot_node(world.sim, inference=0, pdb_min_available=None)
    theirs = "nodeclaim/" + nodeclaim_name("another-event", NODE)
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": {REPLACEMENT: theirs}}})
    # When this Spot warning is handled
    result = _spot_run(world)
    # Then the mark leaves that claim and nothing is launched
    assert result["outcome"] == "handled", result["reason"]
    assert not any(a["type"] == "replacement" for a in result["actions"])
    assert world.node(NODE)["metadata"]["annotations"][REPLACEMENT] == theirs
    assert world.sim.list("NodeClaim") == []
