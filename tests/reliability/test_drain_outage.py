"""A Kubernetes API outage at each step of a Spot warning's first invocation, the drain run in-process.

The drain workflow's side of an outage (the rounds retried through a one-minute outage, an outage
that outlasts the deadline ending in `NotDrained`, a failure after the mark handed to the workflow
that waits it out) is run by the executed state machine: tests/infra/test_drain_workflow_executed.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.engine.context import Deps
from sim import KubeSim
from tests.reliability.conftest import sim_deps
from tests.reliability.harness import (
    Cluster,
    Observer,
    build_cluster,
    deadline_of,
    fresh_sim,
    spot_event,
)
from tests.reliability.outages import STEPS, OutageFrom

# --------------------------------------------------------------------------- the outage at every step


def _node_untouched(sim: KubeSim, cluster: Cluster, observer: Observer) -> None:
    node = sim.get("Node", cluster.node)
    assert node is not None
    assert not (node["metadata"].get("annotations") or {}).get(ann.EVENT_ID), node["metadata"]
    assert not node["spec"].get("unschedulable"), node["spec"]
    assert observer.write_attempt_paths() == [], observer.write_attempt_paths()


def _gone_before_the_deadline(sim: KubeSim, cluster: Cluster, deadline: datetime) -> None:
    assert sim.clock.now() < deadline
    for key in cluster.must_go:
        namespace, name = key.split("/")
        pod = sim.get("Pod", name, namespace)
        assert pod is None or pod["metadata"].get("deletionTimestamp"), key


@dataclass
class Scene:
    sim: KubeSim
    cluster: Cluster
    deps: Deps
    event: dict[str, Any]
    deadline: datetime
    outage: OutageFrom


@contextmanager
def _warning_with_an_outage(step: str) -> Iterator[Scene]:
    """A Spot node with trainers (1 s to checkpoint) and plain pods, the warning just received, and
    the API server dropping every connection for 20 s from ``step`` on."""
    with fresh_sim(speed=4.0, ack_delay=1.0) as (sim, _workloads):
        cluster = build_cluster(sim, pdb_min_available=None, grace=5)
        event = spot_event(sim.clock.now())
        outage = OutageFrom(sim, STEPS[step])
        yield Scene(sim, cluster, sim_deps(sim), event, deadline_of(event), outage)


@pytest.mark.parametrize("step", list(STEPS))
def test_a_20_s_outage_at_each_step_of_a_spot_warnings_first_invocation_ends_as_the_contract_says(
    aws: None, step: str
) -> None:
    with _warning_with_an_outage(step) as scene:
        observer = Observer(scene.sim) if step == "before the mark" else None
        # When the API server goes down at that step of `gpuwarden invoke` (the drain run in-process)
        scene.sim.faults.inject(reset=True, predicate=scene.outage)
        result = handle_batch(parse_notices(scene.event), scene.deps).to_json()

        assert scene.outage.began is not None, f"the outage never started ({step})"
        if observer is not None:
            # Then before the mark: failed, and nothing written
            assert result["outcome"] == "failed", result
            assert result["actions"] == [], result
            assert "no cluster reachable" in result["reason"], result["reason"]
            _node_untouched(scene.sim, scene.cluster, observer)
            return
        # Then after it: handled, the failure in the actions and the ledger, drained before the deadline
        types = [a["type"] for a in result["actions"]]
        assert result["outcome"] == "handled", result
        assert "cordon" in types, types
        (handed,) = [a for a in result["actions"] if a["type"] == "handed-on"]
        assert handed["error"] == "ClusterUnreachable", handed
        assert "the drain workflow took over" in result["reason"], result["reason"]
        assert result["drain"]["outcome"] == "drained", result["drain"]
        assert result["drain"]["seconds_left"] > 0, result["drain"]
        ledger = scene.deps.ledger.get(scene.event["id"])
        assert ledger is not None
        assert "ClusterUnreachable" in str(ledger.get("handed_on")), ledger
        _gone_before_the_deadline(scene.sim, scene.cluster, scene.deadline)


def test_an_outage_after_the_mark_that_outlasts_the_deadline_fails_naming_what_is_left(aws: None) -> None:
    # Given a Spot warning with 20 s left, and the API server gone for good once the node is marked
    # on the clock that moves only when the code sleeps: at 10x under load 12 the first invocation's
    # wall time alone used the 20 s, and the first failed round already found the deadline passed
    with fresh_sim(speed=None, ack_delay=1.0) as (sim, _workloads):
        build_cluster(sim, pdb_min_available=None, grace=5)
        event = spot_event(sim.clock.now(), age=100)
        outage = OutageFrom(sim, STEPS["between the mark and the requests"], seconds=3600.0)
        sim.faults.inject(reset=True, predicate=outage)
        # When `gpuwarden invoke` runs it (the rounds in-process, with the workflow's retry)
        result = handle_batch(parse_notices(event), sim_deps(sim)).to_json()

    # Then the rounds were retried until the deadline's grace, and the answer is failed, as the
    # workflow's NotDrained: what failed, after its retries, and what was done before
    assert result["outcome"] == "failed", result
    assert result["reason"].startswith("drain not finished after its retries: node "), result["reason"]
    assert "deadline" in result["reason"], result["reason"]
    assert result["node"] is not None, result
    assert [a["type"] for a in result["actions"]] == ["cordon", "handed-on", "drain-blocked"], result["actions"]
