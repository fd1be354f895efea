"""Exit codes scripts can trust: a runbook action on a node that is not in the cluster fails
(exit 1, naming it); `invoke --dry-run` plans like `runbook --dry-run` and writes nothing; a
dry run says what it would do ("would signal"), never an exit code of a command that never ran."""

from __future__ import annotations

import json

from sim import KubeSim
from tests.integration.cli_subprocess import WRITES, cluster, invoke, moto_endpoint, run, sim, spot_now
from tests.integration.scenarios import spot_node

__all__ = ["moto_endpoint", "sim"]


def test_a_runbook_drain_of_a_node_not_in_the_cluster_fails_with_exit_1(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a cluster / When a drain is asked for a node name with a typo
    cluster(sim)
    completed = run(sim, moto_endpoint, ["runbook", "drain", "--node", "typo", "--json"], {})
    # Then failed, exit 1, naming what was not found
    assert completed.returncode == 1, completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["outcome"] == "failed"
    assert "typo" in answer["reason"]
    assert "not found" in answer["reason"]


def test_invoke_dry_run_plans_and_writes_nothing_and_says_would(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a Spot warning for a node whose trainers checkpoint by signal and annotation
    scenario = cluster(sim)
    before = len(sim.requests)
    # When it is invoked with --dry-run
    completed = invoke(sim, moto_endpoint, "--dry-run", "-", stdin=json.dumps(spot_now(sim)))
    # Then the answer is the plan, exit 0, and nothing was written
    assert completed.returncode == 0, completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["outcome"] == "dry-run"
    assert answer["node"] == scenario.node
    assert [r for r in sim.requests[before:] if r.method in WRITES] == []
    assert "exit 0" not in completed.stdout


def test_a_dry_run_drain_reports_would_signal_never_an_exit_code(sim: KubeSim, moto_endpoint: str) -> None:
    # Given a node with a trainer that checkpoints on a signal
    scenario = spot_node(sim, modes=("signal:SIGUSR1",), inference=1, pdb_min_available=None, grace=1)
    # When a drain is dry-run
    completed = run(sim, moto_endpoint, ["runbook", "drain", "--node", scenario.node, "--dry-run", "--json"], {})
    assert completed.returncode == 0, completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["outcome"] == "dry-run"
    # Then the signal is reported as what would happen, not as a command's exit code
    assert "exit 0" not in completed.stdout
    assert "would signal" in completed.stdout
