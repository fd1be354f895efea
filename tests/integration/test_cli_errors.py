"""Errors with a way out, as a new user meets them (docs/cli.md, "Exit codes"): the console script in a
subprocess (and under a pseudo-terminal where a person would read it) against the simulator.

- A policy that does not validate is said once, one line per error, with "did you mean"; exit 2 from
  every command that runs with it, and nothing is written.
- At a terminal the answer is prose, never a JSON dump; piped, the failed JSON follows on stdout.
- Every argument is checked before any work starts: `simulate --days -1`, a `--plot` folder that is
  not there (never created), a bad `--policy` are exit 2, as for `invoke`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pexpect
import pytest

from sim import KubeSim
from tests.integration.cli_subprocess import GPUWARDEN, WRITES, cluster, invoke_env, moto_endpoint, sim, spot_now

__all__ = ["moto_endpoint", "sim"]

MISSPELLED = "cluster: ml-prod\ngpu_idle:\n  threshold_percnt: 10\n"
PROBLEM = "gpu_idle.threshold_percnt: unknown key (given 10): did you mean `threshold_percent`?"


def run(
    args: list[str], env: dict[str, str], stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUWARDEN), *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def at_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """What a person sees: stdout and stderr of the command under a pseudo-terminal, and its exit code."""
    child = pexpect.spawn(str(GPUWARDEN), args, env=env, encoding="utf-8", timeout=120, dimensions=(50, 250))
    child.expect(pexpect.EOF)
    child.close()
    return int(child.exitstatus), str(child.before)


@pytest.fixture
def misspelled(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(MISSPELLED)
    return path


def test_every_command_refuses_a_misspelled_policy_with_exit_2_saying_it_once(
    sim: KubeSim, moto_endpoint: str, misspelled: Path
) -> None:
    # Given a cluster, a Spot warning for its node, and the policy (threshold_percent misspelled)
    scenario = cluster(sim)
    env = invoke_env(sim, moto_endpoint) | {"GPUWARDEN_POLICY_FILE": str(misspelled)}
    before = len(sim.requests)
    # When each command that runs with the policy is run, piped as a script runs it
    runs = {
        "invoke": run(["invoke", "-"], env, stdin=json.dumps(spot_now(sim))),
        "runbook": run(["runbook", "drain", "--node", scenario.node], env),
        "release": run(["release", "--all"], env),
        "scan": run(["scan"], env),
    }
    for name, done in runs.items():
        # Then exit 2, the problem named once on stderr (no log line repeating it, no URL, no traceback)
        assert done.returncode == 2, (name, done.stderr)
        assert done.stderr.count("threshold_percnt") == 1, (name, done.stderr)
        assert PROBLEM in done.stderr, name
        assert "https://" not in done.stderr + done.stdout, name
        assert "Traceback" not in done.stderr, name
        # And the script gets the failed JSON on stdout, naming the file and the key
        answer = json.loads(done.stdout)
        assert answer["outcome"] == "failed", name
        assert str(misspelled) in answer["reason"], name
        assert "did you mean `threshold_percent`" in answer["reason"], name
    # And nothing was written to the cluster
    assert [r for r in sim.requests[before:] if r.method in WRITES] == []


def test_at_a_terminal_a_misspelled_policy_is_prose_once_never_json(
    sim: KubeSim, moto_endpoint: str, misspelled: Path
) -> None:
    scenario = cluster(sim)
    env = invoke_env(sim, moto_endpoint) | {"GPUWARDEN_POLICY_FILE": str(misspelled)}
    for args in (["runbook", "plan", "--node", scenario.node], ["invoke", "events/spot-interruption.json"]):
        code, seen = at_terminal(args, env)
        assert code == 2, seen
        assert seen.count("threshold_percnt") == 1, seen
        assert PROBLEM in seen
        assert "{" not in seen, seen  # no JSON result and no JSON log line where a person reads


def test_doctor_calls_a_missing_policy_file_not_found(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    cluster(sim)
    missing = tmp_path / "nowhere" / "policy.yaml"
    done = run(["doctor", "--json"], invoke_env(sim, moto_endpoint) | {"GPUWARDEN_POLICY_FILE": str(missing)})
    # Then the policy finding is an error (exit 1, as for any doctor finding) that says "not found"
    assert done.returncode == 1, done.stderr
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "policy"]
    assert finding["severity"] == "error"
    assert f"policy file {missing} not found" in finding["message"]
    assert "does not validate" not in finding["message"]


def test_doctor_reports_a_misspelled_policy_as_a_finding_with_did_you_mean(
    sim: KubeSim, moto_endpoint: str, misspelled: Path
) -> None:
    cluster(sim)
    done = run(["doctor", "--json"], invoke_env(sim, moto_endpoint) | {"GPUWARDEN_POLICY_FILE": str(misspelled)})
    assert done.returncode == 1, done.stderr
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "policy"]
    assert PROBLEM in finding["message"]


def test_invalid_input_is_said_once(sim: KubeSim, moto_endpoint: str) -> None:
    done = run(["runbook", "plan"], invoke_env(sim, moto_endpoint))
    assert done.returncode == 2
    assert done.stderr.count("exactly one of 'node' or 'instance_id' is required") == 1, done.stderr


def _simulate_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("GPUWARDEN_", "KUBECONFIG"))}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--days", "-1"], "--days"),
        (["--days", "0"], "--days"),
        (["--seeds", "-1"], "--seeds"),
        (["--plot", "/nonexistent-gpuwarden/x.png"], "does not exist"),
        (["--plot", "plot.pngx"], "must end in one of"),
    ],
)
def test_simulate_refuses_a_bad_argument_before_any_work(args: list[str], said: str) -> None:
    # When simulate is given an argument it cannot honour
    done = run(["simulate", "--seeds", "0", *args], _simulate_env())
    # Then exit 2 at once, naming it, and no folder is created for a plot
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not Path("/nonexistent-gpuwarden").exists()


def test_simulate_refuses_a_misspelled_policy_as_invoke_does(misspelled: Path) -> None:
    done = run(["simulate", "--seeds", "0", "--policy", str(misspelled)], _simulate_env())
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("threshold_percnt") == 1
    assert PROBLEM in done.stderr
    assert "https://" not in done.stderr


def test_simulate_refuses_a_scenario_that_does_not_validate(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("name: x\ninstance_types: []\npools: []\ndayz: 3\n")
    done = run(["simulate", "--scenario", str(scenario)], _simulate_env())
    assert done.returncode == 2, done.stderr
    assert "dayz: unknown key (given 3): did you mean `days`?" in done.stderr


def test_at_a_terminal_a_failure_is_read_once(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a runbook drain of a node that is not in the cluster, at a terminal
    cluster(sim)
    code, seen = at_terminal(["runbook", "drain", "--node", "typo"], invoke_env(sim, moto_endpoint))
    # Then exit 1 and the reason once, in prose (the failure's log line is not printed beside the answer)
    assert code == 1, seen
    assert seen.count("typo is not a node of cluster") == 1, seen
    assert "{" not in seen, seen
