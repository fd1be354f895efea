"""`gpuwarden release` (docs/rollback.md): every mark gpuwarden left taken back, and only those.

Given a cluster where gpuwarden cordoned a node for a Spot warning (its taint, annotations, the
do-not-disrupt marks and checkpoint requests on the node's pods, a replacement record) and a
budget window wrote a NodePool, when the release runs, then nothing of gpuwarden's is left, the
NodePool is byte for byte what its owner wrote, and what is not gpuwarden's stays as it was.
"""

from __future__ import annotations

import copy
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.domain import annotations as ann
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.services.dispatch import handle_batch, handle_release, handle_tick
from gpuwarden.services.engine.context import Deps
from sim.actors.karpenter import Karpenter
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import Scenario, spot_node

NIGHT_2230 = datetime(2026, 6, 1, 22, 30, tzinfo=UTC)
WINDOW = {"name": "night-cap", "schedule": "0 22 * * *", "timezone": "UTC", "duration": "8h"}
POLICY = Policy.model_validate({"cluster": "ml-prod", "windows": [WINDOW | {"max_disruptions": 1, "gpu_limit": 8}]})
DND = "karpenter.sh/do-not-disrupt"


def _deps(world: World, *, dry_run: bool = False) -> Deps:
    deps = world.deps(POLICY, dry_run=dry_run)
    deps.window_clock = lambda: NIGHT_2230
    deps.start_drain = lambda _state: None  # deployed: the drain workflow would carry the drain on
    return deps


def _marked_cluster(world: World) -> tuple[Scenario, dict[str, Any]]:
    """A node gpuwarden took for a Spot warning (drain handed off, so its marks stay) and a
    NodePool a window wrote; answers the pool as its owner wrote it."""
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    owners_pool = copy.deepcopy(world.sim.get("NodePool", "gpu-training"))
    assert owners_pool is not None
    deps = _deps(world)
    opened = handle_tick(
        parse_scheduler_tick({"gpuwarden": "budget-window", "action": "open", "window": "night-cap"}), deps
    )
    assert opened.outcome == "handled", opened.reason
    event = load_event("spot-interruption.json", time=world.sim.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"))
    taken = handle_batch(parse_notices(event), deps, drain_locally=False)
    assert taken.outcome == "handled", taken.reason
    # the trainer's acknowledgement lands before anything is released (else it would land after a
    # release and leave a mark for the next one to find)
    trainer = scenario.trainers["annotate"]
    for _ in range(400):
        notes = (world.pod(trainer) or {}).get("metadata", {}).get("annotations") or {}
        if "gpuwarden.io/checkpoint-done" in notes:
            break
        time.sleep(0.025)
    return scenario, owners_pool


def _gpuwarden_marks(world: World) -> list[str]:
    marks: list[str] = []
    for node in world.sim.list("Node"):
        name = node["metadata"]["name"]
        marks += [f"{name}: {k}" for k in node["metadata"].get("annotations") or {} if k.startswith(ann.PREFIX)]
        marks += [f"{name}: taint {t['key']}" for t in node["spec"].get("taints") or [] if t["key"] == ann.TAINT_KEY]
        marks += [f"{name}: cordoned" for _ in [1] if node["spec"].get("unschedulable")]
    for pod in world.sim.list("Pod"):
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        annotations = pod["metadata"].get("annotations") or {}
        gpuwarden_owned = (ann.DO_NOT_DISRUPT_ADDED, ann.CHECKPOINT_REQUESTED, ann.CHECKPOINT_EVENT, DND)
        marks += [f"{key}: {k}" for k in annotations if k in gpuwarden_owned]
    return marks


def _pool(world: World) -> dict[str, Any]:
    found = world.sim.get("NodePool", "gpu-training")
    assert found is not None
    return found


def test_release_all_takes_back_every_mark_and_restores_the_nodepool_exactly(world: World) -> None:
    # Given a node gpuwarden took for a Spot warning, and a NodePool an open window wrote
    scenario, owners_pool = _marked_cluster(world)
    before = _gpuwarden_marks(world)
    assert f"{scenario.node}: taint {ann.TAINT_KEY}" in before
    assert f"{scenario.trainers['annotate']}: {ann.DO_NOT_DISRUPT_ADDED}" in before
    assert _pool(world)["spec"] != owners_pool["spec"]
    # When everything is released
    result = handle_release(_deps(world), None).to_json()
    # Then no gpuwarden mark is left, and the pool is its owner's again, byte for byte
    assert result["outcome"] == "handled", result["reason"]
    assert _gpuwarden_marks(world) == []
    pool = _pool(world)
    assert json.dumps(pool["spec"], sort_keys=True) == json.dumps(owners_pool["spec"], sort_keys=True)
    # (an emptied annotations map reads as no annotations, as kube-apiserver omits an empty map)
    assert (pool["metadata"].get("annotations") or {}) == (owners_pool["metadata"].get("annotations") or {})
    types = {a["type"] for a in result["actions"]}
    assert {"release", "pod-released", "nodepool-set"} <= types
    # And a second release finds nothing to take back
    again = handle_release(_deps(world), None).to_json()
    assert again["outcome"] == "ignored"
    assert again["actions"] == []
    assert again["reason"].startswith("nothing to release on ")
    assert "no gpuwarden mark" in again["reason"]
    assert "released" not in again["reason"]


def test_release_leaves_what_is_not_gpuwardens(world: World) -> None:
    # Given a node someone else cordoned, and a pod whose owner set do-not-disrupt
    scenario = spot_node(world.sim, modes=("annotate",), inference=1, pdb_min_available=None)
    other = "ip-10-0-2-40.us-west-2.compute.internal"
    world.sim.patch_direct("Node", other, {"spec": {"unschedulable": True}})
    name = scenario.trainers["annotate"].split("/")[1]
    world.sim.patch_direct("Pod", name, {"metadata": {"annotations": {DND: "true"}}}, "ml")
    # When everything is released
    result = handle_release(_deps(world), None).to_json()
    # Then the owner's cordon and do-not-disrupt are untouched, and nothing was written
    assert result["actions"] == []
    assert world.node(other)["spec"]["unschedulable"] is True
    pod = world.pod(scenario.trainers["annotate"])
    assert pod is not None
    assert pod["metadata"]["annotations"][DND] == "true"


def test_release_of_one_node_and_its_dry_run(world: World) -> None:
    # Given a node gpuwarden took
    scenario, _ = _marked_cluster(world)
    before = _gpuwarden_marks(world)
    # When the release of that node is only planned
    planned = handle_release(_deps(world, dry_run=True), scenario.node).to_json()
    # Then it says what it would take back and changes nothing
    assert planned["outcome"] == "dry-run"
    assert planned["node"] == scenario.node
    assert planned["reason"].startswith(f"would release {scenario.node}: marks to take back on"), planned["reason"]
    assert {a["type"] for a in planned["actions"]} >= {"release", "pod-released"}
    assert _gpuwarden_marks(world) == before
    # When it runs, then that node's marks are gone (the NodePool is only restored with --all)
    done = handle_release(_deps(world), scenario.node).to_json()
    assert done["outcome"] == "handled"
    assert done["reason"].startswith(f"released {scenario.node}: marks taken back on")
    assert [m for m in _gpuwarden_marks(world) if m.startswith(scenario.node)] == []
    assert ann.SAVED_BUDGETS in (_pool(world)["metadata"].get("annotations") or {})


def test_release_of_a_node_that_is_not_in_the_cluster_fails(world: World) -> None:
    result = handle_release(_deps(world), "ip-typo").to_json()
    assert result["outcome"] == "failed"
    assert "ip-typo" in result["reason"]


def test_release_asks_for_exactly_one_of_all_and_node() -> None:
    runner = CliRunner()
    for args in (["release"], ["release", "--all", "--node", "n"]):
        outcome = runner.invoke(main, args)
        assert outcome.exit_code == 2, outcome.output
        assert "--all" in outcome.output


def _claim_marks(world: World) -> list[str]:
    """gpuwarden's marks on the NodeClaims: its hold (do-not-disrupt with hold-until) and annotations."""
    marks: list[str] = []
    for claim in world.sim.list("NodeClaim"):
        notes = claim["metadata"].get("annotations") or {}
        marks += [f"{claim['metadata']['name']}: {k}" for k in notes if k.startswith(ann.PREFIX) or k == DND]
    return marks


@pytest.mark.parametrize(
    "registered",
    ["no", "yes", "node-name-not-written", "node-made-by-the-provider"],
    ids=[
        "before-registration",
        "after-registration",
        "registered-before-its-claim-names-the-node",
        "made-from-the-claim-before-registration",
    ],
)
def test_release_takes_back_the_replacements_hold_and_a_second_release_writes_nothing(
    world: World, registered: str
) -> None:
    # Given a Spot drain that launched a replacement NodeClaim with gpuwarden's hold
    _marked_cluster(world)
    assert any(m.endswith(f": {ann.HOLD_UNTIL}") for m in _claim_marks(world)), _claim_marks(world)
    karpenter = Karpenter(world.sim, interruption_queue=False, launch_seconds=0)
    if registered != "no":  # Karpenter's registration copied the claim's annotations onto its node
        karpenter.step()
        (claim,) = [c for c in world.sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")]
        node = world.node(claim["status"]["nodeName"])
        assert ann.HOLD_UNTIL in node["metadata"]["annotations"], node["metadata"]
        assert node["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") == "true", node["metadata"]
        # (the claim names its event launched-for: an event-id would read as the node held by gpuwarden)
        assert ann.EVENT_ID not in node["metadata"]["annotations"], node["metadata"]
        if registered in ("node-name-not-written", "node-made-by-the-provider"):
            # real Karpenter registers the node before it writes the claim's status.nodeName (seen on
            # the real plane: docs/realplane.md, finding 13): only the node's owner reference names it
            world.sim.patch_direct("NodeClaim", claim["metadata"]["name"], {"status": {"nodeName": None}})
            assert "nodeName" not in (world.sim.get("NodeClaim", claim["metadata"]["name"]) or {})["status"]
        if registered == "node-made-by-the-provider":
            # the KWOK provider creates the node from the claim, its annotations too, before Karpenter
            # registers it (no owner reference yet): only the providerID names the claim's node
            world.sim.patch_direct("Node", node["metadata"]["name"], {"metadata": {"ownerReferences": None}})
    # When everything is released
    result = handle_release(_deps(world), None).to_json()
    # Then the claim's hold and marks are taken back, as every other mark
    assert result["outcome"] == "handled", result["reason"]
    assert "hold-released" in {a["type"] for a in result["actions"]}
    assert _claim_marks(world) == []
    # And once Karpenter registers the claim (when it had not), its node carries nothing of gpuwarden's
    karpenter.step()
    assert _gpuwarden_marks(world) == []
    held = [
        n for n in world.sim.list("Node") if (n["metadata"].get("annotations") or {}).get("karpenter.sh/do-not-disrupt")
    ]
    assert held == [], [n["metadata"] for n in held]
    # And a second release writes nothing
    world.sim.clear_requests()
    again = handle_release(_deps(world), None).to_json()
    assert (again["outcome"], again["actions"]) == ("ignored", []), again
    assert [r for r in world.sim.requests if r.method in ("POST", "PUT", "PATCH", "DELETE")] == []


def test_release_all_reads_the_pods_once_whatever_the_number_of_nodes(world: World) -> None:
    # Given a marked cluster with 40 more GPU nodes, each with 2 pods (docs/benchmarks.md, "1,000 nodes")
    from sim import builders as b

    _marked_cluster(world)
    for i in range(40):
        node = f"ip-10-9-0-{i}.us-west-2.compute.internal"
        world.sim.create(b.gpu_node(node, f"i-0e{i:015x}"))
        for p in range(2):
            world.sim.create(b.inference_pod(f"more-{i}-{p}", node, namespace="ml"))
    world.sim.clear_requests()
    # When everything is released
    result = handle_release(_deps(world), None).to_json()
    # Then every mark is taken back, from one LIST of the cluster's pods (one page here), never a
    # LIST per node: the request count does not grow with the cluster's nodes
    assert result["outcome"] == "handled", result["reason"]
    assert _gpuwarden_marks(world) == []
    pod_lists = [r for r in world.sim.requests if r.method == "GET" and r.path == "/api/v1/pods"]
    assert len(pod_lists) == 1, [(r.path, r.query) for r in pod_lists]
    assert "fieldSelector" not in pod_lists[0].query
    reads = [r for r in world.sim.requests if r.method == "GET"]
    assert len(reads) <= 12, [(r.path, r.query) for r in reads]
