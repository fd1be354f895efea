"""The on-call engineer's hour (docs/cli.md#exit-codes): exit codes a script can branch on, Ctrl-C that
says where the node was left, and the demo's timeline at a terminal. The installed console script
in its own process (a pseudo-terminal through pexpect where a terminal matters), KUBECONFIG at the
simulator on the real clock, moto in server mode for AWS."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pexpect
import pytest

from sim import KubeSim
from sim.builders import gpu_node, inference_pod, job, nodepool, pdb, training_pod
from sim.clock import rfc3339
from tests.integration.cli_subprocess import GPUWARDEN, invoke_env, moto_endpoint
from tests.integration.conftest import load_event

# the fixtures: a real-time simulator with acking workloads, a moto server
__all__ = ["moto_endpoint"]

NODE = "ip-10-0-1-23.us-west-2.compute.internal"
INSTANCE = "i-0abc1234def567890"  # the Spot samples' instance


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    """Real time, no workloads answering: each test says what runs on the node."""
    with KubeSim(clock_speed=1.0) as running:
        running.create(nodepool("gpu-training"))
        running.create(gpu_node(NODE, INSTANCE, nodepool="gpu-training", ip="10.0.1.23"))
        yield running


def run(sim: KubeSim, endpoint: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """As a script runs it: stdout piped (the JSON answer)."""
    return subprocess.run(
        [str(GPUWARDEN), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=invoke_env(sim, endpoint),
        timeout=180,
        check=False,
    )


def spawn(sim: KubeSim, endpoint: str, *args: str) -> pexpect.spawn:
    """As a person runs it: at a terminal."""
    env = invoke_env(sim, endpoint) | {"POWERTOOLS_LOG_LEVEL": "ERROR", "COLUMNS": "250"}
    return pexpect.spawn(str(GPUWARDEN), list(args), env=env, encoding="utf-8", timeout=120, dimensions=(50, 250))


def trainer(sim: KubeSim, *, finalizer: str | None = None) -> None:
    owner = sim.create(job("train-0", "ml"))
    pod = training_pod("train-0-worker", NODE, gpus=8, checkpoint="annotate", owner=owner, grace=1)
    if finalizer:  # what the Job controller's job-tracking finalizer does when no controller removes it
        pod["metadata"]["finalizers"] = [finalizer]
    sim.create(pod)


def test_a_runbook_drain_refused_by_the_nodepools_budget_exits_3(sim: KubeSim, moto_endpoint: str) -> None:
    # Given the seeds' training pool: consolidation off (budget nodes "0")
    sim.patch_direct("NodePool", "gpu-training", {"spec": {"disruption": {"budgets": [{"nodes": "0"}]}}})
    trainer(sim)
    # When a script drains the node
    done = run(sim, moto_endpoint, "runbook", "drain", "--node", NODE)
    # Then nothing happened, the answer says why, and the exit code is not 0 (was 0: `ignored`)
    assert done.returncode == 3, done.stderr
    answer = json.loads(done.stdout)
    assert answer["outcome"] == "ignored"
    assert [a["type"] for a in answer["actions"]] == ["refused"]
    assert "budget #1 (nodes '0')" in answer["reason"]
    assert not (sim.get("Node", NODE) or {})["spec"].get("unschedulable")
    # and --force drains it (exit 0)
    forced = run(sim, moto_endpoint, "runbook", "drain", "--node", NODE, "--force")
    assert forced.returncode == 0, forced.stdout
    assert json.loads(forced.stdout)["drain"]["outcome"] == "drained"


def test_an_event_for_another_instance_stays_exit_0(sim: KubeSim, moto_endpoint: str) -> None:
    event = load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))
    event["detail"]["instance-id"] = "i-0000000000000dead"
    done = run(sim, moto_endpoint, "invoke", "-", stdin=json.dumps(event))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "ignored"


def test_a_spot_drain_its_deadline_overtook_exits_4(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a trainer that stays on the node (a finalizer no one removes) and a Spot warning with
    # 2 s of its two minutes left
    trainer(sim, finalizer="batch.kubernetes.io/job-tracking")
    sent = sim.clock.now() - timedelta(seconds=118)
    event = load_event("spot-interruption.json", time=rfc3339(sent))
    # When it is invoked by a script
    done = run(sim, moto_endpoint, "invoke", "-", stdin=json.dumps(event))
    # Then the answer is `handled` (every step was taken) but the drain did not finish: exit 4 (was 0)
    answer = json.loads(done.stdout)
    assert answer["outcome"] == "handled", answer["reason"]
    assert answer["drain"]["outcome"] == "deadline-passed"
    assert done.returncode == 4, done.stderr


def test_ctrl_c_during_a_drain_says_where_the_node_is_left_and_exits_130(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a pod a PDB never lets go
    labels = {"app": "inference"}
    sim.create(inference_pod("inference-0", sim.get("Node", NODE), labels=labels, grace=1))  # type: ignore[arg-type]
    sim.create(pdb("inference", "serving", labels, min_available=1))
    child = spawn(sim, moto_endpoint, "runbook", "drain", "--node", NODE, "--reason", "INC-1")
    child.expect(r"\d+ blocked by PDB serving/inference")
    # When the engineer presses Ctrl-C
    child.sendintr()
    # Then the node's state is said, with the command that goes on and the one that gives it back
    child.expect(rf"interrupted: {re.escape(NODE)} is cordoned \(by gpuwarden\)")
    child.expect(r"taints: .*gpuwarden.io/disruption=manual:NoSchedule")
    child.expect(r"gpuwarden marks: .*gpuwarden.io/event-id")
    child.expect(rf"to go on: gpuwarden runbook drain --node {re.escape(NODE)}")
    child.expect(rf"to give the node back: gpuwarden release --node {re.escape(NODE)}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130  # was 1, "Aborted!"
    # And `release` at a terminal prints its timeline, and gives the node back
    released = spawn(sim, moto_endpoint, "release", "--node", NODE)
    released.expect(rf"manual {re.escape(NODE)}: handled")
    released.expect(r"\+\s*\d+\.\d\ds\s+release\s")
    released.expect(pexpect.EOF)
    released.close()
    assert released.exitstatus == 0
    assert not (sim.get("Node", NODE) or {})["spec"].get("unschedulable")


def test_invoke_at_a_terminal_prints_the_timeline_and_json_when_asked(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    from sim.actors.workloads import Workloads

    Workloads(sim, delay=0.2).install()
    trainer(sim)
    event = tmp_path / "spot.json"
    event.write_text(json.dumps(load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))))
    # When the README's Spot warning is sent at a terminal
    child = spawn(sim, moto_endpoint, "invoke", str(event))
    # Then the demo's timeline, not ~200 lines of JSON
    child.expect(rf"spot-interruption {re.escape(NODE)}: handled")
    child.expect(r"drain: drained")
    child.expect(r"\+\s*0\.00s\s+cordoned")
    child.expect(r"asked\s+ml/train-0-worker")
    child.expect(r"evicted\s+ml/train-0-worker")
    child.expect(r"drained\s")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert '"actions"' not in (child.before or "")
    # And with --json at a terminal, the JSON answer (a second delivery: duplicate)
    again = spawn(sim, moto_endpoint, "invoke", "--json", str(event))
    again.expect(pexpect.EOF)
    again.close()
    text = again.before or ""
    assert json.loads(text[text.index("{") :])["kind"] == "spot-interruption"
