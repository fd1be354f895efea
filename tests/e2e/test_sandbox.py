"""`gpuwarden demo --serve --real` as a new user tries it: the sandbox's `export` line, their own
four-rank Indexed Job and a JobSet applied with kubectl, Karpenter's KWOK nodes printed with their
EC2 instances, a Spot warning invoked for one of them, Ctrl-C (docs/realplane.md, "The sandbox")."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.world import ARTIFACTS, EVENTS, GPUWARDEN

pytestmark = [pytest.mark.timeout(420), pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")]

INDEXED_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: llama-ddp, namespace: default}
spec:
  completions: 4
  parallelism: 4
  completionMode: Indexed
  template:
    metadata:
      annotations: {gpuwarden.io/checkpoint: "exec:true"}
    spec:
      restartPolicy: Never
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
      - name: trainer
        image: registry.local/llama:1
        command: [torchrun, --nnodes=4, --node_rank=$(JOB_COMPLETION_INDEX), train.py]
        resources: {limits: {nvidia.com/gpu: 8}}
"""
JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: llama-js, namespace: default}
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers: [{name: trainer, image: registry.local/llama:1}]
"""
INSTANCE_LINE = re.compile(r"^# node (\S+) \((\S+)\) is EC2 instance (i-\w+)$")


def _lines_until(out: Path, proc: subprocess.Popen[str], done: object, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = out.read_text().splitlines()
        if done(lines):  # type: ignore[operator]
            return lines
        assert proc.poll() is None, out.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"sandbox: not reached in {timeout} s:\n{out.read_text()[-3000:]}")


def test_a_users_indexed_job_runs_on_karpenters_nodes_and_gpuwarden_handles_a_spot_warning(tmp_path: Path) -> None:
    out = tmp_path / "sandbox.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG"))}
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [str(GPUWARDEN), "demo", "--serve", "--real"], stdout=sink, stderr=subprocess.STDOUT, text=True, env=env
        )
    try:
        # Given the sandbox's export line
        lines = _lines_until(out, proc, lambda ls: any(ln.startswith("export ") for ln in ls), 120)
        line = next(ln for ln in lines if ln.startswith("export "))
        exported = dict(kv.split("=", 1) for kv in shlex.split(line)[1:])
        shell = {**env, **exported}

        def kubectl(*args: str, stdin: str | None = None) -> str:
            done = subprocess.run(
                ["kubectl", *args], input=stdin, capture_output=True, text=True, env=shell, timeout=60, check=False
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        # When the user applies their own four-rank Indexed Job and a JobSet
        kubectl("apply", "-f", "-", stdin=INDEXED_JOB)
        kubectl("apply", "-f", "-", stdin=JOBSET)
        assert "llama-js" in kubectl("get", "jobsets.jobset.x-k8s.io", "-o", "name")
        # Then Karpenter launches a node per rank, each printed with its EC2 instance, and the ranks run there
        lines = _lines_until(out, proc, lambda ls: sum(bool(INSTANCE_LINE.match(ln)) for ln in ls) >= 4, 180)
        instances = {m[1]: m[3] for ln in lines if (m := INSTANCE_LINE.match(ln))}

        def ranks_running() -> dict[str, str] | None:
            """Every rank Running and Ready, and no other pod of the Job (a rank replaced meanwhile
            would leave one that is not): what gpuwarden asks is the Job's Running pods."""
            pods = json.loads(kubectl("get", "pods", "-l", "batch.kubernetes.io/job-name=llama-ddp", "-o", "json"))
            found = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods["items"]}
            ready = [
                p
                for p in pods["items"]
                if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            ]
            return found if len(ready) == len(found) == 4 else None

        deadline = time.monotonic() + 120
        while (ranks := ranks_running()) is None:
            assert time.monotonic() < deadline, kubectl("get", "pods", "-o", "wide")
            time.sleep(0.5)
        assert set(ranks.values()) <= set(instances), (ranks, instances)
        # When a Spot warning for one rank's node is invoked as the sandbox says (sed into the sample)
        node = sorted(ranks.values())[0]
        sample = (EVENTS / "spot-interruption-empty-time.json").read_text()
        event = sample.replace("i-0abc1234def567890", instances[node])
        invoke = [str(GPUWARDEN), "invoke", "-"]
        before = kubectl("get", "pods", "-o", "wide")
        done = subprocess.run(invoke, input=event, capture_output=True, text=True, env=shell, timeout=200, check=False)
        saved = ARTIFACTS / "sandbox.invoke"
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.with_suffix(".stdout").write_text(done.stdout)
        saved.with_suffix(".stderr").write_text(before + "\n" + done.stderr)
        # Then gpuwarden handled it: every rank asked, the rank on that node evicted, its node replaced
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert (result["outcome"], result["node"]) == ("handled", node), result
        types = [a["type"] for a in result["actions"]]
        assert types.count("checkpoint-requested") == 4, (types, before)
        assert types.count("evict") == 1, types
        assert "replacement" in types, types
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert out.read_text().splitlines()[-1] == "# sandbox stopped"
