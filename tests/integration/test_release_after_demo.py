"""`gpuwarden release`: after the demo's scenes, `release --all` leaves the cluster with no
gpuwarden mark and the NodePools byte-for-byte as before the windows opened; a second run
changes nothing; a dry run writes nothing; a node not in the cluster fails (docs/rollback.md)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.gangs import ASK, GROUP, LEADER
from gpuwarden.services.dispatch import handle_release
from gpuwarden.wiring import dry_run_view
from sim import KubeSim
from sim.wiring import sim_deps

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: the owner's opt-in: not a mark gpuwarden left
OWNERS = (ann.CHECKPOINT, ann.CHECKPOINT_CONTAINER, ann.CHECKPOINT_TIMEOUT, GROUP, ASK, LEADER)


def _marks(sim: KubeSim) -> list[str]:
    found = []
    for node in sim.list("Node"):
        meta = node["metadata"]
        found += [f"node {meta['name']}: {k}" for k in meta.get("annotations") or {} if k.startswith(ann.PREFIX)]
        found += [f"node {meta['name']}: taint" for t in node["spec"].get("taints") or [] if t["key"] == ann.TAINT_KEY]
    for pod in sim.list("Pod"):
        meta = pod["metadata"]
        ours = [k for k in meta.get("annotations") or {} if k.startswith(ann.PREFIX) and k not in OWNERS]
        found += [f"pod {meta['namespace']}/{meta['name']}: {k}" for k in ours]
    for pool in sim.list("NodePool"):
        found += [
            f"nodepool {pool['metadata']['name']}: {k}"
            for k in pool["metadata"].get("annotations") or {}
            if k.startswith(ann.PREFIX)
        ]
    return found


def _pools(sim: KubeSim) -> dict[str, str]:
    return {
        p["metadata"]["name"]: json.dumps({"spec": p["spec"], "annotations": p["metadata"].get("annotations")})
        for p in sim.list("NodePool")
    }


@pytest.fixture
def after_the_demo(monkeypatch: pytest.MonkeyPatch) -> Any:
    from sim.actors.controllers import ReplicaSetReplacer
    from sim.actors.karpenter import Karpenter
    from sim.actors.workloads import Workloads
    from sim.demo import SCENES
    from sim.scenes.base import build_cluster, simulated_aws

    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    with simulated_aws(), KubeSim(clock_speed=30.0) as sim:
        build_cluster(sim)
        Workloads(sim, delay=6.0).install()
        karpenter = Karpenter(sim, interruption_queue=False).start()
        ReplicaSetReplacer(sim)
        before: dict[str, str] = {}
        for scene in SCENES:
            if scene.__name__ == "windows_scene":
                before = _pools(sim)  # as before the windows opened
            scene(sim)
        karpenter.stop()
        yield sim, copy.deepcopy(before)


def test_release_all_after_the_demo_leaves_no_mark_and_the_nodepools_as_before(after_the_demo: Any) -> None:
    sim, before = after_the_demo
    # Given the cluster as the demo's scenes left it (the windows opened on the NodePools)
    deps = sim_deps(sim, caller="test")
    assert _marks(sim), "the demo leaves gpuwarden marks to take back"
    assert _pools(sim) != before, "the demo's windows changed the NodePools"
    # When a dry run is asked first: nothing is written
    writes_before = len([r for r in sim.requests if r.method in WRITES])
    planned = handle_release(dry_run_view(deps), None).to_json()
    assert planned["outcome"] in ("dry-run",)
    assert len([r for r in sim.requests if r.method in WRITES]) == writes_before
    # When `release --all` runs
    result = handle_release(deps, None).to_json()
    # Then no gpuwarden mark is left, and every NodePool is as before the windows opened
    assert result["outcome"] in ("handled", "ignored"), result
    assert _marks(sim) == []
    after = _pools(sim)
    assert {k: after[k] for k in before} == before
    # And a second run finds nothing to do and writes nothing
    writes = len([r for r in sim.requests if r.method in WRITES])
    again = handle_release(deps, None).to_json()
    assert again["outcome"] == "ignored", again
    assert len([r for r in sim.requests if r.method in WRITES]) == writes
