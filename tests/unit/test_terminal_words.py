"""What a terminal says is what the figures count and in the right tense: the drain's progress
line counts what it says (a pod waits on a checkpoint only when it was asked for one; grace
periods and turns are counted apart), and a dry run's actions are what it would do."""

from __future__ import annotations

import io

from gpuwarden.services.runbook.run import DrainProgress
from gpuwarden.terminal import ProgressLine, human_lines


def test_the_progress_line_names_what_each_count_counts() -> None:
    out = io.StringIO()
    progress = DrainProgress("n1", 5, {"serving/inference": 1}, 17.0, False, "draining", checkpoint=3, grace=1)
    ProgressLine(out)(progress)
    line = out.getvalue()
    assert (
        "5 left, 1 blocked by PDB serving/inference, 3 waiting on a checkpoint, 1 in their grace period, 17 s" in line
    )
    assert "turn" not in line
    assert "gang" not in line


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
