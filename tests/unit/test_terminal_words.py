"""What a terminal says is what the figures count and in the right tense: the drain's progress
line calls its `waiting` count what it is (checkpoints, grace periods and turns, not only
checkpoints), and a dry run's actions are what it would do."""

from __future__ import annotations

import io

from gpuwarden.services.runbook.run import DrainProgress
from gpuwarden.terminal import ProgressLine, human_lines


def test_the_progress_line_names_what_its_waiting_count_counts() -> None:
    out = io.StringIO()
    ProgressLine(out)(DrainProgress("n1", 5, 4, {"serving/inference": 1}, 17.0, False, "draining"))
    line = out.getvalue()
    assert "5 left, 1 blocked by PDB serving/inference, 4 waiting (checkpoint, grace or turn), 17 s" in line
    assert "waiting on a checkpoint" not in line


def test_a_dry_runs_actions_are_what_it_would_do() -> None:
    result = {
        "action": "drain",
        "node": "n1",
        "outcome": "dry-run",
        "dry_run": True,
        "reason": "dry run: would cordon n1 and drain 1 pods (see plan)",
        "actions": [{"type": "cordon", "taint": "gpuwarden.io/disruption=manual:NoSchedule"}],
    }
    lines = human_lines(result)
    assert "would do (dry run):" in lines
    assert "actions:" not in lines
    assert "actions:" in human_lines(result | {"outcome": "handled", "dry_run": False})
