"""Settings that fail closed, as a new user meets them: `gpuwarden invoke` / `runbook` / `doctor` in a
subprocess with a setting gpuwarden does not understand refuse to run (exit 2, the variable named,
the failed JSON on stdout, never a traceback) and write nothing to the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim import KubeSim
from tests.integration.cli_subprocess import WRITES, cluster, moto_endpoint, run, sim, spot_now

__all__ = ["moto_endpoint", "sim"]

BAD_SETTINGS = [
    ({"DRY_RUN": "on"}, "DRY_RUN"),
    ({"GPUWARDEN_NOW": "tomorrow"}, "GPUWARDEN_NOW"),
    ({"GPUWARDEN_NOW": "2026-06-01T09:30:00"}, "GPUWARDEN_NOW"),
    ({"GPUWARDEN_KUBE_QPS": "fast"}, "GPUWARDEN_KUBE_QPS"),
    ({"GPUWARDEN_POLICY_FILE": "/nonexistent/policy.yaml"}, "/nonexistent/policy.yaml"),
]


@pytest.mark.parametrize(("extra", "named"), BAD_SETTINGS)
def test_a_setting_gpuwarden_does_not_understand_refuses_to_run_and_writes_nothing(
    sim: KubeSim, moto_endpoint: str, extra: dict[str, str], named: str
) -> None:
    # Given a Spot warning for a node of the cluster, and one bad setting
    scenario = cluster(sim)
    event = spot_now(sim)
    before = len(sim.requests)
    # When it is invoked, and a runbook drain is asked
    invoked = run(sim, moto_endpoint, ["invoke", "-"], extra, stdin=json.dumps(event))
    drained = run(sim, moto_endpoint, ["runbook", "drain", "--node", scenario.node, "--json"], extra)
    # Then both refuse: exit 2, the setting named on stderr and in the JSON result, no traceback
    for completed in (invoked, drained):
        assert completed.returncode == 2, completed.stderr
        assert named in completed.stderr
        assert "Traceback" not in completed.stderr
        answer = json.loads(completed.stdout)
        assert answer["outcome"] == "failed"
        assert named in answer["reason"]
    # And nothing was written to the cluster
    assert [r for r in sim.requests[before:] if r.method in WRITES] == []


def test_doctor_with_a_bad_setting_exits_2_naming_it(sim: KubeSim, moto_endpoint: str) -> None:
    completed = run(sim, moto_endpoint, ["doctor", "--json"], {"DRY_RUN": "maybe"})
    assert completed.returncode == 2
    assert "DRY_RUN" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_a_malformed_kubeconfig_is_the_failed_json_naming_the_file(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nclusters: [\n  - name: x\n bad")
    completed = run(sim, moto_endpoint, ["runbook", "status", "--node", "any", "--json"], {"KUBECONFIG": str(broken)})
    assert completed.returncode == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["outcome"] == "failed"
    assert str(broken) in answer["reason"]
