"""A drain that outlives a one-minute Kubernetes API outage, driven as the deployed workflow drives it.

`run_workflow` follows the synthesized definition (infra/components/drain_workflow.py, read back by
tests/infra/test_drain_workflow_faults.py): the drain function's round (`handlers.drain.workflow_round`,
the handler's own body), Choice on `done`, Wait `wait_seconds`, Retry of the transient fault names
with `RETRY`'s backoff (its longest delays: full jitter only shortens them), Catch of `DrainGaveUp`
into `NotDrained`; any other error fails the execution. Every wait is on the simulator's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.domain.drain_faults import RETRY, TRANSIENT
from gpuwarden.domain.errors import DrainGaveUp
from gpuwarden.handlers.drain import workflow_round
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.engine.context import Deps
from tests.reliability.conftest import sim_deps
from tests.reliability.harness import build_cluster, deadline_of, fresh_sim, spot_event


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
