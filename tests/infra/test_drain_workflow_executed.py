"""The synthesized drain workflow, executed by moto's interpreter with the real drain handler as its
task, on the simulator (tests/infra/executed_workflow.py says how the invoke is routed); each scene
is run again with `drain_to_end`, the local driver that imitates the workflow, from the same hand-off
on a cluster built the same way: the two must end the same (docs/architecture.md, "The drain
workflow, executed": the executed workflow is the judge, the imitation the fast witness)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuwarden.domain.drain import STOP_MARGIN_SECONDS
from gpuwarden.domain.drain_faults import VOLUNTARY_RETRIES
from gpuwarden.domain.errors import DrainGaveUp
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import VOLUNTARY, spec_of
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.pipeline import drain_to_end
from infra.components.gpu_idle import PREFIXES_CONTEXT
from sim import KubeSim
from tests.infra.conftest import USER_PREFIX, Synth
from tests.infra.executed_workflow import Machine, Workflow, executing_machine
from tests.reliability.conftest import moto_environment, sim_deps
from tests.reliability.harness import Cluster, build_cluster, deadline_of, fresh_sim, spot_event
from tests.reliability.outages import STEPS, OutageFrom

#: the workflow's Fail state for a drain given up (infra/components/drain_workflow.py's `NotDrained`)
NOT_FINISHED = "DrainNotFinished"


@pytest.fixture(scope="module")
def machine(synth_with: Any) -> Iterator[Machine]:
    with moto_environment():
        # the Event Ruler table's synth (one per session): the same state machine as every other
        synth: Synth = synth_with({PREFIXES_CONTEXT: USER_PREFIX})
        with executing_machine(synth.template_json) as made:
            yield made


@dataclass(frozen=True)
class Scene:
    """A Spot node's cluster and warning, and what happens to them once the drain is handed on."""

    ack_delay: float = 20.0  # simulated seconds a trainer takes to acknowledge its checkpoint
    age: float = 0.0  # how old the warning is when handled (its deadline is time + 120 s)
    cluster: dict[str, Any] = field(default_factory=lambda: {"pdb_min_available": None, "grace": 5})
    outage: float = 0.0  # simulated seconds the API server drops every connection, from the first round
    outage_after: int = 0  # ... or from after this many rounds after the hand-off
    voluntary: bool = False  # handed on as a voluntary kind's drain (no deadline)
    node_gone: bool = False  # the Node is deleted before the first round (the instance went, Karpenter finished it)


@dataclass(frozen=True)
class End:
    """How a drain ended, in the terms both drivers share."""

    status: str  # SUCCEEDED (Drained) | FAILED
    error: str | None  # the execution's error name (NotDrained's: DrainNotFinished)
    outcome: str | None  # the last state's `outcome` (None when the run failed)
    pods: dict[str, str]  # every pod of the scene: gone | leaving | there
    not_checkpointed: tuple[str, ...]
    #: seconds before the deadline the drain ended: compared where named (a Retry's jittered pause
    #: and `drain_to_end`'s longest one end an outage at different instants, on the same side)
    seconds_left: float | None = field(default=None, compare=False)


def _pods(sim: KubeSim, cluster: Cluster) -> dict[str, str]:
    out = {}
    for key in [*cluster.must_go, *cluster.elsewhere]:
        namespace, name = key.split("/")
        pod = sim.get("Pod", name, namespace)
        out[key] = "gone" if pod is None else "leaving" if pod["metadata"].get("deletionTimestamp") else "there"
    return out


def _handed(deps: Deps, scene: Scene, event: dict[str, Any]) -> dict[str, Any]:
    """The interruption function's run: it marks, asks, and hands the drain on (the deployed path)."""
    handed: list[dict[str, Any]] = []
    deps.start_drain = handed.append
    first = handle_batch(parse_notices(event), deps, drain_locally=False)
    assert first.outcome == "handled", first.reason
    (state,) = handed
    if scene.voluntary:  # the state a voluntary kind hands over: no deadline forces it
        return {**state, "kind": sorted(VOLUNTARY)[0], "deadline": None, "event_id": "voluntary-1"}
    return state


def _before_round(sim: KubeSim, cluster: Cluster, scene: Scene, rounds: int) -> None:
    """What happens after ``rounds`` rounds since the hand-off, before the next."""
    if scene.outage and rounds == scene.outage_after:
        sim.faults.inject(reset=True, duration=scene.outage)
    if scene.node_gone and rounds == 0:
        sim.delete_direct("Node", cluster.node)


def imitated(scene: Scene) -> End:
    """The scene driven by `drain_to_end` from the hand-off (what the local path runs)."""
    with fresh_sim(speed=None, ack_delay=scene.ack_delay) as (sim, _workloads):
        cluster = build_cluster(sim, **scene.cluster)
        deps = sim_deps(sim)
        state = DrainState.model_validate(_handed(deps, scene, spot_event(sim.clock.now(), age=scene.age)))
        _before_round(sim, cluster, scene, 0)
        rounds = itertools.count(1)
        try:
            last = drain_to_end(
                Recorder(deps, state.event_id),
                state,
                spec_of(state.kind).hooks,
                on_round=lambda _state: _before_round(sim, cluster, scene, next(rounds)),
            ).state
        except DrainGaveUp:
            return End("FAILED", NOT_FINISHED, None, _pods(sim, cluster), ())
        return End(
            "SUCCEEDED",
            None,
            last.outcome.value,
            _pods(sim, cluster),
            tuple(sorted(last.not_checkpointed)),
            last.seconds_left,
        )


@dataclass
class Executed:
    end: End
    execution: dict[str, Any]
    workflow: Workflow
    history: list[str]  # the execution's event types, in order
    failures: list[str]  # every error name a round raised
    event: dict[str, Any]
    cluster: Cluster


def executed(machine: Machine, scene: Scene, *, starts: int = 1) -> Executed:
    """The scene with the drain handed to the executed workflow (``starts`` times, one name)."""
    with fresh_sim(speed=None, ack_delay=scene.ack_delay) as (sim, _workloads):
        cluster = build_cluster(sim, **scene.cluster)
        deps = sim_deps(sim)
        event = spot_event(sim.clock.now(), age=scene.age)
        with machine.scene(deps) as workflow:
            state = _handed(deps, scene, event)
            # counted from the workflow's first round, as `imitated` counts drain_to_end's
            machine.routed.before_round = lambda rounds: _before_round(sim, cluster, scene, rounds)
            for _ in range(starts):
                workflow.start(state)
            execution = workflow.finished()
            events = workflow.history(execution)
        output = json.loads(execution.get("output") or "{}")
        succeeded = execution["status"] == "SUCCEEDED"
        end = End(
            execution["status"],
            execution.get("error"),
            output["outcome"] if succeeded else None,
            _pods(sim, cluster),
            tuple(sorted(output["not_checkpointed"])) if succeeded else (),
            output.get("seconds_left") if succeeded else None,
        )
        failures = [
            e["lambdaFunctionFailedEventDetails"]["error"] for e in events if e["type"] == "LambdaFunctionFailed"
        ]
        return Executed(end, execution, workflow, [e["type"] for e in events], failures, event, cluster)


def test_a_drain_of_several_rounds_waits_for_the_acknowledgements_and_the_same_name_starts_once(
    machine: Machine,
) -> None:
    # Given trainers that acknowledge 20 (simulated) seconds after they are asked
    scene = Scene(ack_delay=20.0)
    # When the drain is handed on twice (a redelivered event: the same execution name)
    run = executed(machine, scene, starts=2)
    # Then one execution ran, round after round (Wait on wait_seconds), to Drained before the deadline
    assert len(run.workflow.executions()) == 1
    assert run.end.status == "SUCCEEDED", run.execution
    assert run.end.outcome == "drained", run.end
    assert len(run.workflow.inputs) >= 2, "one round drained a node with trainers still checkpointing"
    assert "WaitStateEntered" in run.history
    assert {i["retry_count"] for i in run.workflow.inputs} == {0}
    assert run.end.not_checkpointed == ()
    assert all(run.end.pods[key] in {"gone", "leaving"} for key in run.cluster.must_go), run.end.pods
    assert all(run.end.pods[key] == "there" for key in run.cluster.elsewhere), run.end.pods
    assert imitated(scene) == run.end


def test_a_pdb_that_blocks_until_the_deadline(machine: Machine) -> None:
    # Given the inference replicas behind a PDB that allows no disruption at all (grace 5 s)
    scene = Scene(cluster={"pdb_min_available": "100%", "grace": 5})
    run = executed(machine, scene)
    # Then the workflow's rounds met the refusals (Wait, evict again) until `deadline - grace`, where
    # an involuntary kind deletes them with the grace left before `deadline - STOP_MARGIN_SECONDS`:
    # gone 2 s before the deadline, and the round at that instant sees the node empty
    assert run.end.status == "SUCCEEDED", run.execution
    assert run.end.outcome == "drained", run.end
    assert run.end.seconds_left == STOP_MARGIN_SECONDS, run.end
    assert "WaitStateEntered" in run.history
    assert all(run.end.pods[key] in {"gone", "leaving"} for key in run.cluster.must_go), run.end.pods
    # and the imitation ends the same, at the same instant, though its rounds fall elsewhere: the
    # workflow's Wait takes whole seconds (`handlers.drain` rounds `wait_seconds`, at least 1), the
    # imitation sleeps the exact time (0.5 s near the end); the 10x clock's `drained-late` of the
    # executed run was the machine's load, not the Wait (docs/architecture.md)
    imitation = imitated(scene)
    assert imitation == run.end
    assert imitation.seconds_left == run.end.seconds_left


def test_one_round_ends_the_drain_of_a_node_gone_before_it(machine: Machine) -> None:
    # Given trainers still checkpointing when the drain is handed on, and the Node deleted before
    # the workflow's first round (the instance went early, or Karpenter finished the node)
    scene = Scene(node_gone=True)
    run = executed(machine, scene)
    # Then that one round saw it gone: Drained without a Wait, `gone-early`
    assert run.end.status == "SUCCEEDED", run.execution
    assert run.end.outcome == "gone-early", run.end
    assert len(run.workflow.inputs) == 1, run.workflow.inputs
    assert "WaitStateEntered" not in run.history
    # and it names the two trainers that never answered: the state handed on at once, before any
    # round, holds the first invocation's opted-in pods; the imitation says the same
    assert len(run.end.not_checkpointed) == 2, run.end
    assert imitated(scene) == run.end


def test_the_deadline_passes_during_the_rounds(machine: Machine) -> None:
    # Given trainers whose checkpoint takes 200 s (their timeout 600 s) and a warning 60 s old: the
    # instance goes before any of them can finish
    scene = Scene(ack_delay=200.0, age=60.0, cluster={"pdb_min_available": None, "grace": 5, "checkpoint_timeout": 600})
    run = executed(machine, scene)
    # Then the rounds waited on the checkpoints until `deadline - grace`, then sent the trainers away
    # with the grace left: drained before the deadline, the two that answer on their own never
    # checkpointed (the exec one is acknowledged by its command's exit)
    assert run.end.status == "SUCCEEDED", run.execution
    assert run.end.outcome == "drained", run.end
    assert "WaitStateEntered" in run.history
    assert len(run.end.not_checkpointed) == 2, run.end
    assert all(run.end.pods[key] in {"gone", "leaving"} for key in run.cluster.must_go), run.end.pods
    assert imitated(scene) == run.end


def test_an_outage_is_retried_with_the_retry_count_passed_in_and_the_drain_ends(machine: Machine) -> None:
    # Given trainers that take 20 s to checkpoint, and the API server dropping every connection for
    # 30 (simulated) seconds after the workflow's first round (each failed round costs the client's
    # real-time retries, about 1.5 s: the suite's time, not the scene's)
    scene = Scene(ack_delay=20.0, outage=30.0, outage_after=1)
    run = executed(machine, scene)
    # Then the rounds failed as DrainClusterUnreachable, were retried with RetryCount counting up
    assert run.failures, "the outage never met a round"
    assert set(run.failures) == {"DrainClusterUnreachable"}, run.failures
    counts = [i["retry_count"] for i in run.workflow.inputs]
    assert counts[: len(run.failures) + 2] == [0, *range(len(run.failures) + 1)], counts
    # and the drain still ended, drained, before the deadline
    assert run.end.status == "SUCCEEDED", run.execution
    assert run.end.outcome == "drained", run.end
    assert run.end.seconds_left is not None, run.end
    assert run.end.seconds_left >= 0, run.end
    assert imitated(scene) == run.end


def test_an_outage_that_outlasts_the_deadline_ends_not_drained_naming_what_is_left(machine: Machine) -> None:
    # Given a Spot warning with 60 s left, trainers that take 30 s, and the API server gone for good
    # after the workflow's first round
    scene = Scene(ack_delay=30.0, age=60.0, outage=600.0, outage_after=1)
    run = executed(machine, scene)
    # Then the workflow retried until the deadline's grace, then ended in NotDrained with what is left
    assert run.failures[0] == "DrainClusterUnreachable", run.failures
    assert run.failures[-1] == "DrainGaveUp", run.failures  # the function's error, caught into NotDrained
    assert run.end.status == "FAILED", run.execution
    assert run.end.error == NOT_FINISHED, run.execution
    cause = run.execution["cause"]
    assert "deadline" in cause, cause
    assert "left on the node: " in cause, cause
    assert "ml/train-0-worker" in cause, cause
    assert imitated(scene) == run.end


@pytest.mark.parametrize("step", ["between the mark and the requests", "during the replacement"])
def test_deployed_a_failure_after_the_mark_is_handed_to_the_workflow_which_waits_out_the_outage(
    machine: Machine, step: str
) -> None:
    # Given a Spot warning just received, and the API server dropping every connection for 20 s from
    # that step of the first invocation on (tests/reliability/test_drain_outage.py runs it locally)
    with fresh_sim(speed=None, ack_delay=1.0) as (sim, _workloads):
        cluster = build_cluster(sim, pdb_min_available=None, grace=5)
        event = spot_event(sim.clock.now())
        outage = OutageFrom(sim, STEPS[step])
        deps = sim_deps(sim)
        handed: list[dict[str, Any]] = []
        deps.start_drain = handed.append
        sim.faults.inject(reset=True, predicate=outage)
        with machine.scene(deps) as workflow:
            first = handle_batch(parse_notices(event), deps, drain_locally=False).to_json()
            # Then the invocation answers handled with the failure, the workflow started
            assert outage.began is not None
            assert first["outcome"] == "handled", first
            assert "handed-on" in [a["type"] for a in first["actions"]], first["actions"]
            assert handed, "the drain workflow was never started"
            workflow.start(handed[-1])
            execution = workflow.finished()
        # and the workflow's rounds wait the outage out and finish before the deadline
        assert execution["status"] == "SUCCEEDED", execution
        assert json.loads(execution["output"])["outcome"] == "drained", execution
        assert sim.clock.now() < deadline_of(event)
        pods = _pods(sim, cluster)
        assert all(pods[key] in {"gone", "leaving"} for key in cluster.must_go), pods


def test_a_voluntary_drain_that_cannot_reach_the_cluster_gives_up_as_drain_not_finished(machine: Machine) -> None:
    # Given a voluntary kind's drain and the API server down for good from the hand-off
    scene = Scene(ack_delay=30.0, outage=24 * 3600.0, voluntary=True)
    run = executed(machine, scene)
    # Then the workflow retried VOLUNTARY_RETRIES times, then the function gave up: NotDrained's Fail
    assert run.end.status == "FAILED", run.execution
    assert run.end.error == NOT_FINISHED, run.execution
    cause = run.execution["cause"]
    assert f"{VOLUNTARY_RETRIES} retries spent" in cause, cause
    assert "left on the node: " in cause
    counts = [i["retry_count"] for i in run.workflow.inputs]
    assert counts == list(range(VOLUNTARY_RETRIES + 1)), counts
    assert imitated(scene) == run.end
