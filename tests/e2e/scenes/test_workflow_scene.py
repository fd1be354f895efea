"""The drain workflow executed on the real plane: a Spot warning's first invocation marks, asks and
hands the drain on, as deployed; the synthesized state machine, run by moto's interpreter with the
real drain handler as its task (tests/infra/executed_workflow.py), owns every round after that,
against the real API server and real Karpenter, in real time. The API server is stopped after the
first round and started again once a round has failed on it: the workflow's Retry passes
``RetryCount`` in and the drain still ends before its deadline, the trainer evicted only after it
answered, the replacement created once (docs/architecture.md, "The drain workflow, executed")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.config import Settings
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.wiring import build_deps
from infra.config import SKIP_BUNDLING
from realplane.aws import REGION, AwsWorld
from realplane.plane.harness import Plane, dump
from tests.e2e.scene import (
    Acknowledger,
    replacement_claim,
    replicas_and_trainer,
    requests_of,
    scene_cluster,
    times,
)
from tests.e2e.world import CLUSTER, GPUWARDEN_USER, spot_warning
from tests.infra.conftest import synthesize
from tests.infra.executed_workflow import Machine, executing_machine
from tests.reliability.conftest import moto_environment

pytestmark = pytest.mark.timeout(600)

APISERVER = "kube-apiserver"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """moto (in this process, Step Functions executing) with the synthesized drain workflow."""
    with moto_environment():
        synth = synthesize(tmp_path_factory.mktemp("cdk.out"), {"cluster": CLUSTER, SKIP_BUNDLING: True}, bundled=False)
        with executing_machine(synth.template_json) as made:
            yield made


def test_the_executed_workflow_drains_a_spot_node_through_an_api_server_restart(
    plane: Plane, machine: Machine, tmp_path: Path
) -> None:
    serving, ml = "serving-workflow", "ml-workflow"
    with scene_cluster(plane, [serving, ml]) as c:
        # Given two replicas behind a PDB and a trainer (annotate, answers 3 s after it is asked) on
        # one node real Karpenter launched, and the instance behind it in EC2 (moto)
        pods, node = replicas_and_trainer(c, serving, ml, "annotate")
        event = spot_warning(AwsWorld(endpoint="").instance_for_node(c.node(node)))
        settings = Settings(kubeconfig=str(plane.kubeconfig_for(GPUWARDEN_USER)), cluster=CLUSTER, region=REGION)
        handed: list[dict[str, Any]] = []
        deps = build_deps(settings, caller="eventbridge", start_drain=handed.append)
        apiserver = plane.components[APISERVER]

        def stop_after_the_first_round(rounds: int) -> None:
            if rounds == 1:  # the API server goes down (SIGTERM) as the second round starts
                apiserver.stop()

        with Acknowledger(plane, ml, "app=trainer", takes=lambda _: 3.0), machine.scene(deps) as workflow:
            # When the interruption function handles the warning (it hands the drain on at once)
            first = handle_batch(parse_notices(event), deps, drain_locally=False)
            assert first.outcome == "handled", first.reason
            (state,) = handed
            machine.routed.before_round = stop_after_the_first_round
            # and the workflow is started twice under one name (a redelivered event)
            workflow.start(state)
            workflow.start(state)
            # and the API server is started again once a round has failed on it (here: the main
            # thread, `Plane.start_again`)
            (running_one,) = workflow.executions()
            plane.wait_for(
                "a round failed on the stopped API server",
                lambda: "LambdaFunctionFailed" in [e["type"] for e in workflow.history(running_one)],
                timeout=90,
                stopped=(APISERVER,),
            )
            plane.start_again(APISERVER)
            execution = workflow.finished(bound_seconds=300)
            history = workflow.history(execution)
        (plane.artifacts / "workflow-scene.history.json").write_text(json.dumps(history, default=str, indent=1))

        # Then one execution ran and ended Drained before the deadline, every trainer checkpointed
        assert len(workflow.executions()) == 1
        assert execution["status"] == "SUCCEEDED", dump(execution)
        output = json.loads(execution["output"])
        assert output["outcome"] == "drained", dump(output)
        assert output["seconds_left"] > 0, dump(output)
        assert output["not_checkpointed"] == [], dump(output)
        # and every round that met the restart failed by its error's name, retried with the count
        # passed in: each invocation's RetryCount is the number of failures just before it
        failures = [
            e["lambdaFunctionFailedEventDetails"]["error"] for e in history if e["type"] == "LambdaFunctionFailed"
        ]
        assert set(failures) <= {"DrainClusterUnreachable"}, failures
        counts = [i["retry_count"] for i in workflow.inputs]
        run = 0
        for invocation, failed in zip(workflow.inputs, _failed_in_turn(history), strict=True):
            assert invocation["retry_count"] == run, counts
            run = run + 1 if failed else 0
        assert len(workflow.inputs) >= 2, counts

        # and on the real API server: each pod left once, the trainer only after its answer, and
        # the replacement NodeClaim created once
        ours = requests_of(plane)
        for pod in pods:
            name = pod["metadata"]["name"]
            left = times(ours, subresource="eviction", name=name, code=201) + [
                e for e in ours if e["verb"] == "delete" and e["objectRef"].get("name") == name
            ]
            assert len(left) == 1, dump(left)
        trainer = pods[-1]["metadata"]["name"]
        (evicted_at,) = times(ours, subresource="eviction", name=trainer, code=201)
        acks = [
            e
            for e in plane.audit()
            if e["user"]["username"] == "kubernetes-admin"
            and e["verb"] == "patch"
            and e["objectRef"].get("name") == trainer
        ]
        assert times(acks, subresource=None, name=trainer, code=200)[0] < evicted_at
        claim = replacement_claim(c.node(node))
        creates = [e for e in ours if e["verb"] == "create" and e["objectRef"].get("resource") == "nodeclaims"]
        assert len(times(creates, subresource=None, name=claim, code=201)) == 1, dump(creates)


def _failed_in_turn(history: list[dict[str, Any]]) -> list[bool]:
    """For each Lambda invocation of the execution, in order: whether it failed."""
    return [
        e["type"] == "LambdaFunctionFailed"
        for e in history
        if e["type"] in ("LambdaFunctionSucceeded", "LambdaFunctionFailed")
    ]
