"""Rebalance recommendations, instance state changes, unknown instances and malformed events."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event, types
from tests.integration.scenarios import spot_node

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def event(world: World, name: str, **overrides: Any) -> dict[str, Any]:
    return load_event(name, time=rfc3339(world.sim.clock.now()), **overrides)


def writes(world: World) -> list[str]:
    return [f"{r.method} {r.path}" for r in world.sim.requests if r.method in WRITES]


def test_rebalance_with_the_default_policy_prepares_without_evicting(world: World) -> None:
    # Given a Spot node with opted-in trainers and inference pods
    scenario = spot_node(world.sim, modes=("signal:SIGUSR1", "annotate"), inference=1, pdb_min_available=None)
    # When a rebalance recommendation arrives (policy rebalance.action defaults to prepare)
    result = handle_batch(parse_notices(event(world, "rebalance-recommendation.json")), world.deps()).to_json()
    # Then the node is tainted, a replacement launched, the trainers asked to checkpoint; nothing evicted
    assert result["outcome"] == "handled", result["reason"]
    seen = types(result)
    assert seen[0] == "cordon"
    assert seen.count("checkpoint-requested") == 2
    assert "replacement" in seen
    assert not {"evict", "delete", "drain-complete"} & set(seen)
    node = world.node(scenario.node)
    assert {"key": "gpuwarden.io/disruption", "value": "rebalance", "effect": "NoSchedule"} in node["spec"]["taints"]
    for key in [*scenario.trainers.values(), *scenario.inference]:
        assert world.pod(key) is not None, key
    assert len(world.sim.list("NodeClaim")) == 1


def test_rebalance_with_policy_drain_drains_the_node(world: World) -> None:
    # Given a policy that drains on a rebalance recommendation
    scenario = spot_node(world.sim, modes=("annotate",), inference=2, pdb_min_available=1, grace=2)
    policy = POLICY.model_validate({"cluster": "ml-prod", "rebalance": {"action": "drain"}})
    # When the recommendation arrives
    result = handle_batch(parse_notices(event(world, "rebalance-recommendation.json")), world.deps(policy)).to_json()
    # Then the node is drained (the PDB respected: evictions only), the DaemonSet pod left alone
    assert result["outcome"] == "handled", result["reason"]
    assert result["drain"]["outcome"] == "drained"
    assert "delete" not in types(result)
    for key in [*scenario.trainers.values(), *scenario.inference]:
        assert world.pod(key) is None, key
    assert world.pod(scenario.daemonset_pod) is not None


def test_terminated_instance_of_a_drained_node_is_recorded_quietly(world: World) -> None:
    # Given a node gpuwarden already drained for a Spot warning
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None, grace=2)
    spot = handle_batch(parse_notices(event(world, "spot-interruption.json")), world.deps())
    assert spot.drain is not None
    assert spot.drain["outcome"] == "drained"
    # When the instance's state changes to terminated
    terminated = event(world, "instance-state-change-terminated.json")
    result = handle_batch(parse_notices(terminated), world.deps()).to_json()
    # Then the loss is recorded as expected, with no warning
    assert result["outcome"] == "handled", result["reason"]
    assert result["kind"] == "instance-stopping"
    assert types(result) == ["instance-lost"]
    assert f"node {scenario.node} had been drained" in result["reason"]
    assert not [e for e in world.sim.list("Event") if e["reason"] == "NodeLostUndrained"]


def test_terminated_instance_of_an_undrained_node_is_reported_loudly(world: World) -> None:
    # Given a node still running a trainer and two inference pods (plus a DaemonSet and a mirror pod)
    scenario = spot_node(world.sim, modes=("annotate",), inference=2, pdb_min_available=None)
    # When its instance is terminated with no warning gpuwarden saw
    result = handle_batch(parse_notices(event(world, "instance-state-change-terminated.json")), world.deps()).to_json()
    # Then the result, and a Warning Event on the node, say that three pods were lost
    assert result["outcome"] == "handled", result["reason"]
    assert types(result) == ["node-lost-undrained"]
    assert "(3 pods lost)" in result["reason"]
    lost = [e for e in world.sim.list("Event") if e["reason"] == "NodeLostUndrained"]
    assert len(lost) == 1
    assert lost[0]["type"] == "Warning"
    assert lost[0]["involvedObject"] == {**lost[0]["involvedObject"], "kind": "Node", "name": scenario.node}
    assert scenario.trainers["annotate"] in lost[0]["message"]


def test_terminated_node_with_pods_is_reported_even_if_an_earlier_drain_completed(world: World) -> None:
    # Given a node that an earlier event drained, and that runs pods again since
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    stale = {"gpuwarden.io/event-id": "an-earlier-event", "gpuwarden.io/drain-completed": "2026-01-01T00:00:00Z"}
    world.sim.patch_direct("Node", scenario.node, {"metadata": {"annotations": stale}})
    # When its instance is terminated
    result = handle_batch(parse_notices(event(world, "instance-state-change-terminated.json")), world.deps()).to_json()
    # Then the pods still on it are reported lost: the old annotation does not hide them
    assert types(result) == ["node-lost-undrained"]
    assert "(2 pods lost)" in result["reason"]


def test_redelivered_state_change_is_a_duplicate_that_reports_nothing_again(world: World) -> None:
    # Given an undrained node whose instance was reported terminated, then stopped (another event)
    spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    terminated = event(world, "instance-state-change-terminated.json")
    handle_batch(parse_notices(terminated), world.deps())
    handle_batch(parse_notices(event(world, "instance-state-change-stopping.json")), world.deps())
    # When the terminated event is delivered again
    again = handle_batch(parse_notices(terminated), world.deps()).to_json()
    # Then it is a duplicate, counted in the ledger, and no third warning is posted
    assert again["outcome"] == "duplicate", again["reason"]
    assert world.ledger.entries[terminated["id"]]["duplicates"] == 1
    assert len([e for e in world.sim.list("Event") if e["reason"] == "NodeLostUndrained"]) == 2


def test_event_for_an_instance_outside_the_cluster_is_ignored_with_a_reason(world: World) -> None:
    # Given a cluster that has no node on instance i-0123456789abcdef0
    spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    stranger = "i-0123456789abcdef0"
    raw = event(
        world,
        "spot-interruption.json",
        resources=[f"arn:aws:ec2:us-west-2:123456789012:instance/{stranger}"],
        detail={"instance-id": stranger, "instance-action": "terminate"},
    )
    # When its Spot warning arrives
    result = handle_batch(parse_notices(raw), world.deps()).to_json()
    # Then it is ignored, naming the instance and the cluster, and nothing is written
    assert result["outcome"] == "ignored"
    assert stranger in result["reason"]
    assert "ml-prod" in result["reason"]
    assert writes(world) == []


def test_malformed_spot_warning_is_rejected_before_anything_is_touched(world: World) -> None:
    # Given a Spot warning that names no instance (its detail lost the id, `resources` is empty)
    spot_node(world.sim, modes=(), inference=1, pdb_min_available=None)
    raw = event(world, "spot-interruption.json", detail={"instance-action": "terminate"}, resources=[])
    # When it is parsed
    with pytest.raises(InvalidEvent) as caught:
        parse_notices(raw)
    # Then the error names the missing field, and the cluster saw no request at all
    assert "instance-id" in str(caught.value)
    assert world.sim.requests == []
