"""`gpuwarden scan` and `gpuwarden invoke` of Alertmanager notifications as a user runs them: the
installed console script in a subprocess, KUBECONFIG pointing at the simulator."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from sim import KubeSim
from sim.builders import gpu_node, nodepool
from tests.integration.cli_subprocess import GPUWARDEN, WRITES, invoke_env, moto_endpoint, sim
from tests.integration.gpu_health_reports import condition, failing, report

# the fixtures: a real-time simulator with acking workloads, a moto server
__all__ = ["moto_endpoint", "sim"]

NODES = [f"ip-10-0-5-{i}.us-west-2.compute.internal" for i in range(5)]


def cluster(sim: KubeSim) -> None:
    sim.create(nodepool("gpu-training"))
    for i, name in enumerate(NODES):
        sim.create(gpu_node(name, f"i-0bbbb{i:012x}", nodepool="gpu-training"))


def run(
    sim: KubeSim, endpoint: str, *args: str, stdin: str | None = None, policy: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = invoke_env(sim, endpoint) | ({"GPUWARDEN_POLICY_FILE": str(policy)} if policy else {})
    return subprocess.run(
        [str(GPUWARDEN), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_scan_json_handles_the_failing_node_and_a_second_scan_changes_nothing(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a pool with one node whose AcceleratedHardwareReady turned False
    cluster(sim)
    since = failing(sim, NODES[1])
    report(sim, NODES[2], condition("nodes/eks-accelerated-hardware-healthy.json"))

    # When `gpuwarden scan --json` runs twice
    first = run(sim, moto_endpoint, "scan", "--json")
    writes_before = len([r for r in sim.requests if r.method in WRITES and "/events" not in r.path])
    second = run(sim, moto_endpoint, "scan", "--json")

    # Then the first handles the node, exit 0; the second is a duplicate that writes nothing
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout)
    assert answer["kind"] == "gpu-unhealthy"
    assert answer["outcome"] == "handled"
    assert [r["node"] for r in answer["results"]] == [NODES[1]]
    assert answer["results"][0]["event_id"].endswith(since)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["outcome"] == "duplicate"
    assert len([r for r in sim.requests if r.method in WRITES and "/events" not in r.path]) == writes_before


def test_a_policy_with_a_bad_gpu_health_is_refused_naming_the_field(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    cluster(sim)
    failing(sim, NODES[0])
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"cluster": "ml-prod", "gpu_health": {"max_unhealthy_percent": 150}}))

    done = run(sim, moto_endpoint, "scan", "--json", policy=policy)

    assert done.returncode == 2
    assert "gpu_health.max_unhealthy_percent" in done.stderr
    assert "Traceback" not in done.stderr
    assert not [r for r in sim.requests if r.method in WRITES and "/status" not in r.path]


def test_invoke_refuses_a_notification_that_is_neither_rendering(sim: KubeSim, moto_endpoint: str) -> None:
    cluster(sim)
    event = {
        "Records": [
            {
                "EventSource": "aws:sns",
                "Sns": {
                    "MessageId": "m-1",
                    "TopicArn": "arn:aws:sns:us-west-2:123456789012:gpuwarden-alertmanager",
                    "Message": "disk almost full on build-7",
                    "Timestamp": "2026-11-24T06:43:31.000Z",
                },
            }
        ]
    }

    done = run(sim, moto_endpoint, "invoke", "-", stdin=json.dumps(event))

    assert done.returncode == 2
    assert "Records.0.Sns.Message" in done.stderr
    assert "Traceback" not in done.stderr
    assert not [r for r in sim.requests if r.method in WRITES]


def test_racing_invocations_for_one_pool_never_hold_more_than_it_allows(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    # Given a pool of 5 nodes (20 %: one may be held) and four Alertmanager notifications, one per node,
    # each delivered to its own `gpuwarden invoke` process at the same time
    cluster(sim)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"cluster": "ml-prod", "alerts": {"GPUXidError": "gpu-unhealthy"}}))
    sample = json.loads((Path(__file__).resolve().parents[2] / "events/alertmanager-sns-text.json").read_text())
    env = invoke_env(sim, moto_endpoint) | {"GPUWARDEN_POLICY_FILE": str(policy)}
    processes = []
    for i, node in enumerate(NODES[:4]):
        event = json.loads(json.dumps(sample))
        sns = event["Records"][0]["Sns"]
        sns["MessageId"] = f"race-{i}"
        sns["Message"] = sns["Message"].replace("ip-10-0-2-40.us-west-2.compute.internal", node)
        path = tmp_path / f"race-{i}.json"
        path.write_text(json.dumps(event))
        processes.append(
            subprocess.Popen(
                [str(GPUWARDEN), "invoke", str(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )

    # When they all finish
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        answers.append(json.loads(out))

    # Then at most one node is held for gpu-unhealthy; every other one was given back or never touched
    held = [n for n in NODES if (sim.get("Node", n) or {})["metadata"].get("annotations", {}).get("gpuwarden.io/kind")]
    assert len(held) <= 1, answers
    for node in NODES[:4]:
        if node not in held:
            assert not (sim.get("Node", node) or {})["spec"].get("unschedulable"), node
    refused = [a for a in answers if a["outcome"] == "ignored"]
    assert all(a["reason"].startswith("breaker: nodepool/gpu-training has 5 nodes") for a in refused), refused


def test_a_scan_that_cannot_reach_the_cluster_is_a_failed_json_answer(tmp_path: Path) -> None:
    from tests.integration.cli_subprocess import closed_port, kubeconfig

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    env |= {"KUBECONFIG": str(kubeconfig(tmp_path, closed_port())), "GPUWARDEN_CLUSTER": "ml-prod"}

    done = subprocess.run([str(GPUWARDEN), "scan", "--json"], capture_output=True, text=True, env=env, timeout=120)

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    answer = json.loads(done.stdout)
    assert (answer["outcome"], answer["kind"], answer["node"]) == ("failed", "gpu-unhealthy", None)
    assert answer["reason"]
