"""Beside Karpenter: a node removed while gpuwarden drains it is reported as gone early, not failed."""

from __future__ import annotations

import threading
from typing import Any

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.builders import gpu_node, job, training_pod
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import INSTANCE, NODE, spot_node


def test_a_node_removed_mid_drain_is_gone_early_with_what_was_and_was_not_checkpointed(world: World) -> None:
    # Given a Spot node with a trainer that acknowledges and one that never does (timeout 60 s)
    node = world.sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    for name in ("quick", "silent"):
        owner = world.sim.create(job(name, "ml"))
        world.sim.create(
            training_pod(f"{name}-worker", node, checkpoint="annotate", checkpoint_timeout=60, owner=owner, grace=2)
        )
    world.workloads.silent.add("ml/silent-worker")
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    results: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: results.append(handle_batch(parse_notices(event), world.deps()).to_json()))
    # When gpuwarden drains, and the node is removed (as Karpenter does once it has finished it)
    worker.start()
    assert world.sim.wait_until(lambda: world.pod("ml/quick-worker") is None, timeout=20)
    world.sim.delete_direct("Node", NODE)
    worker.join(timeout=60)
    # Then the run is handled, the drain gone early, and it says which pod saved its work
    result = results[0]
    assert result["outcome"] == "handled", result["reason"]
    drain = result["drain"]
    assert drain["outcome"] == "gone-early"
    assert drain["checkpointed"] == ["ml/quick-worker"]
    assert drain["not_checkpointed"] == ["ml/silent-worker"]
    gone = [a for a in result["actions"] if a["type"] == "node-gone"]
    assert len(gone) == 1
    assert "not checkpointed: ml/silent-worker" in gone[0]["reason"]


def test_the_result_names_the_replacement_gpuwarden_launched(world: World) -> None:
    spot_node(world.sim, modes=("annotate",), inference=0, pdb_min_available=None, grace=2)
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    result = handle_batch(parse_notices(event), world.deps()).to_json()
    claims = [c["metadata"]["name"] for c in world.sim.list("NodeClaim")]
    assert result["replacement"] == f"nodeclaim/{claims[0]}"


def test_forced_uncordon_takes_back_only_the_do_not_disrupt_gpuwarden_added(world: World) -> None:
    from gpuwarden.services.dispatch import handle_runbook
    from gpuwarden.sources import parse_runbook
    from gpuwarden.wiring import runbook_deps

    # Given a node held for a Spot warning: one trainer marked by gpuwarden, one by its owner
    scenario = spot_node(world.sim, modes=("annotate", "signal:SIGUSR1"), inference=0, pdb_min_available=None)
    ours, owners = (key.split("/")[1] for key in scenario.trainers.values())
    marks = {"karpenter.sh/do-not-disrupt": "true", "gpuwarden.io/do-not-disrupt-added": "spot-1"}
    world.sim.patch_direct("Pod", ours, {"metadata": {"annotations": marks}}, "ml")
    world.sim.patch_direct("Pod", owners, {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}, "ml")
    held = {"gpuwarden.io/kind": "spot-interruption", "gpuwarden.io/event-id": "spot-1"}
    world.sim.patch_direct("Node", NODE, {"metadata": {"annotations": held}, "spec": {"unschedulable": True}})
    # When on-call forces an uncordon (the warning was withdrawn)
    request = parse_runbook({"action": "uncordon", "node": NODE, "force": True, "reason": "false alarm"})
    result = handle_runbook(request, runbook_deps(world.deps(), request)).to_json()
    # Then gpuwarden's own mark is gone, the owner's stays
    assert result["outcome"] == "handled", result["reason"]
    assert "karpenter.sh/do-not-disrupt" not in (world.pod(f"ml/{ours}") or {})["metadata"]["annotations"]
    assert (world.pod(f"ml/{owners}") or {})["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert f"ml/{ours}" in result["reason"] or any(f"ml/{ours}" in str(a.get("reason")) for a in result["actions"])


def _warned_with_its_nodeclaim(
    world: World, *, deleting: bool, disrupting: str | None = None
) -> tuple[str, dict[str, Any]]:
    """A Spot warning for a node as Karpenter registers it: owned by its NodeClaim (deleting, or
    not; ``disrupting``: with the `DisruptionReason` condition Karpenter's disruption queue sets, and
    that reason), beside other pools' claims. Answers the claim's name and the result; the simulator's
    request log holds only the warning's requests."""
    from sim.builders import nodeclaim_for

    spot_node(world.sim, modes=("annotate",), inference=0, pdb_min_available=None, grace=2)
    claim = world.sim.create(nodeclaim_for(world.node(NODE)))["metadata"]
    for i in range(3):
        other = gpu_node(f"ip-10-0-9-{i}.us-west-2.compute.internal", f"i-0ddd{i:013d}", nodepool="gpu-training")
        world.sim.create(nodeclaim_for(other, name=f"gpu-training-other{i}"))
    owner = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim["name"], "uid": claim["uid"]}
    world.sim.patch_direct("Node", NODE, {"metadata": {"ownerReferences": [owner]}})
    if deleting:
        world.sim.delete_direct("NodeClaim", claim["name"])  # its termination finalizer keeps it, deleting
    if disrupting:  # as kubernetes-sigs/karpenter's disruption queue (queue.go, markDisrupted) writes it
        now = rfc3339(world.sim.clock.now())
        condition = {"type": "DisruptionReason", "status": "True", "reason": disrupting, "message": disrupting}
        status = {"conditions": [{**condition, "lastTransitionTime": now}]}
        world.sim.patch_direct("NodeClaim", claim["name"], {"status": status})
    world.sim.clear_requests()
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    return str(claim["name"]), handle_batch(parse_notices(event), world.deps()).to_json()


def _nodeclaim_reads(world: World) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in world.sim.requests if "/nodeclaims" in r.path and r.method == "GET"]


def test_a_node_whose_own_nodeclaim_is_deleting_is_left_to_karpenter_read_by_its_owner_reference(world: World) -> None:
    # Given the Spot node's NodeClaim (its owner) is being deleted by Karpenter, when the warning arrives
    claim, result = _warned_with_its_nodeclaim(world, deleting=True)
    # Then no second replacement, and the reason names the claim
    skipped = [a for a in result["actions"] if a["type"] == "replacement-skipped"]
    assert [a["reason"] for a in skipped] == [f"left to Karpenter: Karpenter is deleting NodeClaim {claim}"]
    assert len(world.sim.list("NodeClaim")) == 4
    # read by name from the node's owner reference, never a list of every claim
    assert _nodeclaim_reads(world) == [("GET", f"/apis/karpenter.sh/v1/nodeclaims/{claim}")]


def test_a_node_whose_nodeclaim_karpenter_is_disrupting_is_left_to_it_and_keeps_no_claim(world: World) -> None:
    # Given Karpenter's disruption has taken the node's NodeClaim (Drifted), its taint not seen yet
    claim, result = _warned_with_its_nodeclaim(world, deleting=False, disrupting="Drifted")
    # Then no second replacement; the claim the mark carried is taken back
    skipped = [a for a in result["actions"] if a["type"] == "replacement-skipped"]
    assert [a["reason"] for a in skipped] == [f"left to Karpenter: Karpenter is disrupting NodeClaim {claim} (Drifted)"]
    assert len(world.sim.list("NodeClaim")) == 4
    assert "gpuwarden.io/replacement" not in world.node(NODE)["metadata"]["annotations"]


def test_a_node_whose_own_nodeclaim_stands_gets_its_replacement_without_listing_every_claim(world: World) -> None:
    claim, result = _warned_with_its_nodeclaim(world, deleting=False)
    assert result["replacement"].startswith("nodeclaim/"), result["actions"]
    reads = _nodeclaim_reads(world)
    assert reads[0] == ("GET", f"/apis/karpenter.sh/v1/nodeclaims/{claim}")
    # the rest: the drain rounds following gpuwarden's own replacement, by name (docs/cluster.md)
    ours = f"/apis/karpenter.sh/v1/nodeclaims/{result['replacement'].removeprefix('nodeclaim/')}"
    assert set(reads[1:]) <= {("GET", ours)}, reads
