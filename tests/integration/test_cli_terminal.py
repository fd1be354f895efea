"""`gpuwarden runbook` at a terminal: the console script under a pseudo-terminal (pexpect),
talking HTTP to the simulator through KUBECONFIG, on the real clock (grace periods ~1 s)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from sim import KubeSim
from sim.actors.controllers import ReplicaSetReplacer
from sim.actors.workloads import Workloads
from sim.builders import daemonset_pod, gpu_node, inference_pod, job, nodepool, pdb, training_pod

NODE = "ip-10-0-1-23.us-west-2.compute.internal"
GPUWARDEN = shutil.which("gpuwarden", path=str(Path(sys.executable).parent)) or "gpuwarden"


@pytest.fixture
def cluster() -> Iterator[KubeSim]:
    """Real-time clock: the CLI in its own process reads the wall clock."""
    with KubeSim(clock_speed=1.0) as sim:
        sim.create(nodepool("gpu-training"))
        node = sim.create(gpu_node(NODE, "i-0abc1234def567890", ip="10.0.1.23"))
        other = sim.create(gpu_node("ip-10-0-2-40.us-west-2.compute.internal", "i-0fedcba9876543210"))
        owner = sim.create(job("train-0", "ml"))
        sim.create(training_pod("train-0-worker", node, gpus=4, checkpoint="annotate", owner=owner, grace=1))
        sim.create(daemonset_pod(node))
        labels = {"app": "inference"}
        for i in range(2):
            sim.create(inference_pod(f"inference-{i}", node, labels=labels, grace=1))
            sim.create(inference_pod(f"inference-b{i}", other, labels=labels, grace=1))
        # 4 healthy, 3 needed: the second eviction waits for the first pod's replacement
        sim.create(pdb("inference", "serving", labels, min_available=3))
        Workloads(sim, delay=0.5).install()
        ReplicaSetReplacer(sim)
        yield sim


def _env(sim: KubeSim) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG"))}
    return env | {
        "KUBECONFIG": str(sim.kubeconfig_path),
        "GPUWARDEN_CLUSTER": "ml-prod",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "COLUMNS": "200",
    }


def _spawn(sim: KubeSim, *args: str) -> pexpect.spawn:
    return pexpect.spawn(GPUWARDEN, list(args), env=_env(sim), encoding="utf-8", timeout=60, dimensions=(50, 250))


def test_plan_at_a_terminal_prints_a_pod_step_reason_table(cluster: KubeSim) -> None:
    # When an on-call engineer asks for a plan at a terminal
    child = _spawn(cluster, "runbook", "plan", "--node", NODE)
    # Then the outcome, the table header and a row per pod appear, and it exits 0
    child.expect(rf"plan {re.escape(NODE)}: handled")
    child.expect(r"POD\s+STEP\s+REASON")
    child.expect(r"ml/train-0-worker\s+signal\s+checkpoint \(annotate\) requested")
    child.expect(r"serving/inference-0\s+evict")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_drain_at_a_terminal_shows_a_live_progress_line_naming_the_pdb(cluster: KubeSim) -> None:
    child = _spawn(cluster, "runbook", "drain", "--node", NODE, "--reason", "INC-1: NVLink errors")
    # Then a progress line is drawn in place (carriage return + erase line) and names the PDB that holds a pod
    child.expect(r"\r\x1b\[Kdraining " + re.escape(NODE) + r": \d+ left")
    child.expect(r"\d+ blocked by PDB serving/inference")
    child.expect(rf"drain {re.escape(NODE)}: handled")
    child.expect(r"drained .* in \d+ s")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert cluster.get("Pod", "train-0-worker", "ml") is None


def test_json_output_parses_when_asked_or_when_stdout_is_not_a_terminal(cluster: KubeSim) -> None:
    asked = _spawn(cluster, "runbook", "status", "--node", NODE, "--json")
    asked.expect(pexpect.EOF)
    asked.close()
    assert asked.exitstatus == 0
    start = asked.before.index("{")
    assert json.loads(asked.before[start:])["action"] == "status"
    piped = subprocess.run(
        [GPUWARDEN, "runbook", "plan", "--node", NODE], env=_env(cluster), capture_output=True, text=True, check=False
    )
    assert piped.returncode == 0, piped.stderr
    answer = json.loads(piped.stdout)
    assert {row["pod"] for row in answer["plan"]} >= {"ml/train-0-worker", "serving/inference-0"}


def test_a_bad_node_name_exits_2_naming_the_field(cluster: KubeSim) -> None:
    child = _spawn(cluster, "runbook", "drain", "--node", "Not_A_Node!")
    child.expect(r"node")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2


def test_every_command_has_help(cluster: KubeSim) -> None:
    for command in ([], ["invoke"], ["runbook"], ["demo"]):
        done = subprocess.run([GPUWARDEN, *command, "--help"], capture_output=True, text=True, check=False)
        assert done.returncode == 0
        assert "Usage:" in done.stdout
