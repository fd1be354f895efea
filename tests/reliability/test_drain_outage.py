"""A drain that outlives a one-minute Kubernetes API outage, driven as the deployed workflow drives it.

`run_workflow` follows the synthesized definition (infra/components/drain_workflow.py, read back by
tests/infra/test_drain_workflow_faults.py): the drain function's round (`handlers.drain.workflow_round`,
the handler's own body), Choice on `done`, Wait `wait_seconds`, Retry of the transient fault names
with `RETRY`'s backoff (its longest delays: full jitter only shortens them), Catch of `DrainGaveUp`
into `NotDrained`; any other error fails the execution. Every wait is on the simulator's clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.drain_faults import RETRY, TRANSIENT
from gpuwarden.domain.errors import DrainGaveUp
from gpuwarden.handlers.drain import workflow_round
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.engine.context import Deps
from sim import KubeSim
from sim.apiserver.faults import RequestInfo
from tests.reliability.conftest import sim_deps
from tests.reliability.harness import Cluster, Observer, build_cluster, deadline_of, fresh_sim, spot_event


@dataclass
class Execution:
    status: str = "RUNNING"  # SUCCEEDED (Drained) | FAILED (NotDrained, or an error not retried)
    output: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # every error name a round raised, in order
    cause: str = ""


def run_workflow(deps: Deps, state: dict[str, Any], after_round: Callable[[int], None]) -> Execution:
    out = Execution()
    retries, rounds = 0, 0
    while True:
        try:
            state = workflow_round(deps, {"state": state, "retry_count": retries})
        except TRANSIENT as err:
            out.errors.append(type(err).__name__)
            if retries + 1 >= RETRY.max_attempts:
                out.status, out.cause = "FAILED", str(err)
                return out
            deps.sleep(RETRY.delay(retries))
            retries += 1
            continue
        except DrainGaveUp as err:
            out.errors.append(type(err).__name__)
            out.status, out.cause, out.output = "FAILED", str(err), state
            return out
        retries, rounds = 0, rounds + 1
        after_round(rounds)
        if state["done"]:
            out.status, out.output = "SUCCEEDED", state
            return out
        deps.sleep(state["wait_seconds"])


def test_a_spot_drain_outlives_a_one_minute_api_outage_and_finishes_before_the_deadline(aws: None) -> None:
    # Given a Spot node with trainers that take 20 s to checkpoint, the warning just received (120 s left)
    with fresh_sim(speed=10.0, ack_delay=20.0) as (sim, _workloads):
        cluster = build_cluster(sim, pdb_min_available=None, grace=5)
        event = spot_event(sim.clock.now())
        deadline = deadline_of(event)
        deps = sim_deps(sim)
        handed: list[dict[str, Any]] = []
        deps.start_drain = handed.append
        first = handle_batch(parse_notices(event), deps, drain_locally=False)
        assert first.outcome == "handled", first
        (state,) = handed
        outage: list[Any] = []

        def api_down_after_the_first_round(rounds: int) -> None:
            if rounds == 1:  # When the API server drops every connection for one (simulated) minute
                outage.append(sim.faults.inject(reset=True, duration=60.0))

        execution = run_workflow(deps, state, api_down_after_the_first_round)

        # Then rounds failed as DrainClusterUnreachable and were retried, never given up
        assert outage
        assert outage[0].hits > 0
        assert execution.errors, "the outage never met a round"
        assert set(execution.errors) == {"DrainClusterUnreachable"}, execution.errors
        # and the drain finished, before the deadline, with every pod that must go gone
        assert execution.status == "SUCCEEDED", execution
        assert execution.output["outcome"] == "drained", execution.output
        assert execution.output["seconds_left"] >= 0, execution.output
        assert sim.clock.now() < deadline
        for key in cluster.must_go:
            namespace, name = key.split("/")
            pod = sim.get("Pod", name, namespace)
            assert pod is None or pod["metadata"].get("deletionTimestamp"), key


def test_an_outage_that_outlasts_the_deadline_ends_not_drained_naming_what_is_left(aws: None) -> None:
    # Given a Spot warning with 60 s left and trainers that will not checkpoint before the API goes down
    with fresh_sim(speed=10.0, ack_delay=30.0) as (sim, _workloads):
        build_cluster(sim, pdb_min_available=None, grace=5)
        event = spot_event(sim.clock.now(), age=60)
        deps = sim_deps(sim)
        handed: list[dict[str, Any]] = []
        deps.start_drain = handed.append
        handle_batch(parse_notices(event), deps, drain_locally=False)
        (state,) = handed

        def api_down_for_good(rounds: int) -> None:
            if rounds == 1:
                sim.faults.inject(reset=True, duration=600.0)

        execution = run_workflow(deps, state, api_down_for_good)

    # Then the workflow retried until the deadline's grace, then ended in NotDrained with what is left
    assert execution.errors[0] == "DrainClusterUnreachable"
    assert execution.errors[-1] == "DrainGaveUp"
    assert execution.status == "FAILED"
    assert "deadline" in execution.cause
    assert "left on the node: " in execution.cause
    assert "ml/train-0-worker" in execution.cause, execution.cause


# --------------------------------------------------------------------------- the outage at every step

OUTAGE_SECONDS = 20.0  # simulated; the client's own retries (about 1.5 s of real time) are far shorter


class OutageFrom:
    """A fault predicate: from the first request ``starts`` matches, every request is dropped for
    `OUTAGE_SECONDS` of simulated time (the API server gone: connections reset)."""

    def __init__(self, sim: KubeSim, starts: Callable[[RequestInfo], bool], seconds: float = OUTAGE_SECONDS) -> None:
        self.sim, self.starts, self.seconds = sim, starts, seconds
        self.began: datetime | None = None

    def __call__(self, req: RequestInfo) -> bool:
        now = self.sim.clock.now()
        if self.began is None:
            if not self.starts(req):
                return False
            self.began = now
        return now < self.began + timedelta(seconds=self.seconds)


def _first(method: str, pattern: str) -> Callable[[RequestInfo], bool]:
    compiled = re.compile(pattern)
    return lambda req: req.method == method and compiled.fullmatch(req.path) is not None


#: Where in a Spot warning's first invocation the outage starts (the request that meets it first).
STEPS: dict[str, Callable[[RequestInfo], bool]] = {
    "before the mark": lambda _req: True,
    "between the mark and the requests": _first("GET", r"/api/v1/pods"),
    "during the replacement": _first("POST", r"/apis/karpenter\.sh/v1/nodeclaims"),
    "during the first drain round": _first("POST", r"/api/v1/namespaces/[^/]+/pods/[^/]+/eviction"),
}


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


@pytest.mark.parametrize("step", [s for s in STEPS if s not in ("before the mark", "during the first drain round")])
def test_deployed_a_failure_after_the_mark_starts_the_drain_workflow_which_waits_out_the_outage(
    aws: None, step: str
) -> None:
    with _warning_with_an_outage(step) as scene:
        # Given deployed: the first invocation starts the drain workflow instead of looping
        handed: list[dict[str, Any]] = []
        scene.deps.start_drain = handed.append
        scene.sim.faults.inject(reset=True, predicate=scene.outage)
        first = handle_batch(parse_notices(scene.event), scene.deps, drain_locally=False).to_json()

        # Then the invocation answers handled with the failure, the workflow started
        assert scene.outage.began is not None
        assert first["outcome"] == "handled", first
        assert "handed-on" in [a["type"] for a in first["actions"]], first["actions"]
        assert handed, "the drain workflow was never started"
        # and the workflow's rounds wait the outage out and finish before the deadline
        execution = run_workflow(scene.deps, handed[-1], lambda _rounds: None)
        assert execution.status == "SUCCEEDED", execution
        assert execution.output["outcome"] == "drained", execution.output
        _gone_before_the_deadline(scene.sim, scene.cluster, scene.deadline)


def test_an_outage_after_the_mark_that_outlasts_the_deadline_fails_naming_what_is_left(aws: None) -> None:
    # Given a Spot warning with 20 s left, and the API server gone for good once the node is marked
    with fresh_sim(speed=10.0, ack_delay=1.0) as (sim, _workloads):
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
