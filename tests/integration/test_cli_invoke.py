"""`gpuwarden invoke` as a user runs it: the installed console script in a subprocess, KUBECONFIG
pointing at the simulator and AWS_ENDPOINT_URL at a moto server. The subprocess keeps real time,
so the simulator runs at speed 1 and the pods' grace periods are 1 s."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from sim import KubeSim
from tests.integration.cli_subprocess import WRITES, cluster, invoke, moto_endpoint, sim, spot_now
from tests.integration.conftest import load_event
from tests.integration.scenarios import Scenario

__all__ = ["moto_endpoint", "sim"]


def writes(sim: KubeSim) -> list[str]:
    return [f"{r.method} {r.path}" for r in sim.requests if r.method in WRITES]


def assert_handled(completed: subprocess.CompletedProcess[str], scenario: Scenario) -> dict[str, Any]:
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout)
    assert result["outcome"] == "handled", result["reason"]
    assert result["kind"] == "spot-interruption"
    assert result["node"] == scenario.node
    assert result["reason"]
    seen = [a["type"] for a in result["actions"]]
    assert seen[0] == "cordon"
    assert seen[-1] == "drain-complete"
    assert seen.index("checkpoint-requested") < seen.index("evict")
    return result


def test_invoke_a_spot_warning_file_prints_the_handled_result(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    # Given a Spot node in the cluster and the sample warning, stamped now, in a file
    scenario = cluster(sim)
    event_file = tmp_path / "spot-interruption.json"
    event_file.write_text(json.dumps(spot_now(sim)))
    # When the console script is run on it
    completed = invoke(sim, moto_endpoint, str(event_file))
    # Then it exits 0 and prints the handled result with its actions in order, and the node is drained
    assert_handled(completed, scenario)
    assert sim.get("Pod", "train-0-worker", "ml") is None
    assert sim.get("Node", scenario.node)["spec"]["unschedulable"] is True  # type: ignore[index]


def test_invoke_reads_the_event_from_standard_input(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a Spot node in the cluster
    scenario = cluster(sim)
    # When the warning is piped to `gpuwarden invoke -`
    completed = invoke(sim, moto_endpoint, "-", stdin=json.dumps(spot_now(sim)))
    # Then the result is the same as from a file
    assert_handled(completed, scenario)


def test_invoke_a_malformed_event_exits_2_and_touches_nothing(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    # Given a Spot warning that names no instance (no instance id, none in `resources`)
    cluster(sim)
    broken = tmp_path / "broken.json"
    event = load_event("spot-interruption.json", detail={"instance-action": "terminate"})
    event["resources"] = []
    broken.write_text(json.dumps(event))
    # When it is invoked
    completed = invoke(sim, moto_endpoint, str(broken))
    # Then exit 2, the validation error on stderr naming the field, nothing on stdout, no request to the cluster
    assert completed.returncode == 2
    assert "invalid input" in completed.stderr
    assert "instance-id" in completed.stderr
    assert completed.stdout == ""
    assert writes(sim) == []


def test_invoke_a_file_that_is_not_json_exits_2(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    # Given a file that is not JSON
    cluster(sim)
    garbage = tmp_path / "event.json"
    garbage.write_text("detail-type: EC2 Spot Instance Interruption Warning\n{")
    # When it is invoked
    completed = invoke(sim, moto_endpoint, str(garbage))
    # Then exit 2 with the parse error on stderr, and nothing was written
    assert completed.returncode == 2
    assert "not JSON" in completed.stderr
    assert writes(sim) == []


def test_stdout_holds_only_the_json_result_even_for_a_big_drain(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    # Given a node with 120 plain pods: more metric values than Powertools buffers (100)
    from sim.builders import pod

    scenario = cluster(sim)
    for i in range(120):
        sim.create(pod(f"batch-{i}", scenario.node, namespace="batch", grace=1))
    path = tmp_path / "spot.json"
    path.write_text(json.dumps(spot_now(sim)))
    # When it is invoked
    completed = invoke(sim, moto_endpoint, str(path))
    # Then stdout is exactly one JSON document, and every pod was evicted
    result = assert_handled(completed, scenario)
    assert sum(1 for a in result["actions"] if a["type"] == "evict") >= 120
