"""`gpuwarden demo --serve`: started in a subprocess as a newcomer would, its export lines read,
`gpuwarden doctor --json` run against them, then SIGINT stops it cleanly."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.serve import NO_CONTROLLERS
from tests.docs_manifests import docs_indexed_job

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")


def test_the_sandbox_serves_the_demo_cluster_until_sigint() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    server = subprocess.Popen(
        [str(GPUWARDEN), "demo", "--serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        # Given the sandbox's export line
        exports: dict[str, str] = {}
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("export "):
                exports = dict(item.split("=", 1) for item in shlex.split(line[len("export ") :]))
                break
        assert {"KUBECONFIG", "GPUWARDEN_POLICY_FILE", "AWS_ENDPOINT_URL", "AWS_REGION"} <= exports.keys()
        # When doctor runs against it from another process
        doctor = subprocess.run(
            [str(GPUWARDEN), "doctor", "--json"],
            capture_output=True,
            text=True,
            env=env | exports,
            timeout=120,
            check=False,
        )
        # Then it reaches the cluster and the policy
        report = json.loads(doctor.stdout)
        findings = {f["check"]: f for f in report["findings"]}
        assert findings["cluster-access"]["severity"] == "ok", findings["cluster-access"]
        assert findings["policy"]["severity"] == "ok", findings["policy"]
        # And a runbook plan sees the demo's GPU node
        plan = subprocess.run(
            [str(GPUWARDEN), "runbook", "plan", "--node", "ip-10-0-1-23.us-west-2.compute.internal", "--json"],
            capture_output=True,
            text=True,
            env=env | exports,
            timeout=120,
            check=False,
        )
        assert plan.returncode == 0, plan.stderr
        assert json.loads(plan.stdout)["plan"]
        # And its Trainium node, with the Neuron trainers (one with a zonal EBS checkpoint volume)
        trn = subprocess.run(
            [str(GPUWARDEN), "runbook", "plan", "--node", "ip-10-0-3-50.us-west-2.compute.internal", "--json"],
            capture_output=True,
            text=True,
            env=env | exports,
            timeout=120,
            check=False,
        )
        assert trn.returncode == 0, trn.stderr
        assert {"ml/neuron-ft-0", "ml/neuron-ft-1"} <= {p["pod"] for p in json.loads(trn.stdout)["plan"]}
    finally:
        # When it gets SIGINT, it stops cleanly
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, err[-2000:]
    assert "sandbox stopped" in out


def test_the_sandbox_serves_the_seed_manifests_with_seeds() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    server = subprocess.Popen(
        [str(GPUWARDEN), "demo", "--serve", "--seeds"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        exports: dict[str, str] = {}
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("export "):
                exports = dict(item.split("=", 1) for item in shlex.split(line[len("export ") :]))
                break
        # When doctor runs against it, its checkpoint-coverage names the seeds' own training Job
        doctor = subprocess.run(
            [str(GPUWARDEN), "doctor", "--json"], capture_output=True, text=True, env=env | exports, timeout=120
        )
        findings = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
        assert "Job ml/distributed-training" in findings["checkpoint-coverage"]["message"], findings
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_kubectl_apply_works_against_the_sandbox_without_flags_and_the_sandbox_says_it_runs_no_controllers() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    server = subprocess.Popen(
        [str(GPUWARDEN), "demo", "--serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        # Given the sandbox's export line and what it says of itself
        assert server.stdout is not None
        said: list[str] = []
        for line in server.stdout:
            said.append(line)
            if line.startswith(NO_CONTROLLERS[:20]):
                break
        exports = dict(
            item.split("=", 1)
            for line in said
            if line.startswith("export ")
            for item in shlex.split(line[len("export ") :])
        )
        assert said[-1].rstrip("\n") == NO_CONTROLLERS
        # When the docs' Indexed Job is applied with kubectl's defaults (--validate=strict), twice, then changed
        job = yaml.safe_dump(docs_indexed_job())
        applied = [
            subprocess.run(
                ["kubectl", "apply", "-f", "-"],
                input=doc,
                capture_output=True,
                text=True,
                env=env | exports,
                check=False,
            )
            for doc in (
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n",
                job,
                job,
                job.replace("terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 60"),
            )
        ]
        # Then each is accepted: the OpenAPI kubectl reads first is served
        assert [a.returncode for a in applied] == [0, 0, 0, 0], [a.stderr for a in applied]
        assert [a.stdout.split()[-1] for a in applied[1:]] == ["created", "unchanged", "configured"]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
