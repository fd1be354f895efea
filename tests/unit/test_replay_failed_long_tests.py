"""A failed long test says how to replay it (tests/replay.py): seed, notes, artifacts.

Each case runs pytest in a subprocess on a small generated test, with the plugin loaded as
tests/conftest.py loads it, and reads what it printed and kept.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.replay import ARTIFACTS_ENV, SEED_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]

INNER = """
import json, os
import pytest
from hypothesis import given, settings, strategies as st
from tests import replay

@pytest.mark.long
@settings(max_examples=40, database=None)
@given(schedule=st.lists(st.integers(0, 100), min_size=1, max_size=6))
def test_schedule_long(schedule):
    with open(os.environ["EXAMPLES_LOG"], "a") as log:
        log.write(json.dumps(schedule) + "\\n")
    replay.note(schedule=schedule, event_id="evt-0001")
    assert sum(schedule) < 150

@pytest.mark.long
def test_passing_long():
    replay.note(event_id="evt-0002")

def test_failing_without_notes():
    assert False
"""


def _run(
    tmp_path: Path, name: str, seed: str | None, profile: str = "default"
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """The inner session under a named Hypothesis profile, so CI's own environment (which makes
    Hypothesis load its derandomized ``ci`` profile) does not decide what is being tested."""
    (tmp_path / "test_inner.py").write_text(INNER)
    artifacts, log = tmp_path / f"artifacts-{name}", tmp_path / f"examples-{name}.log"
    env = {k: v for k, v in os.environ.items() if k not in (SEED_ENV, "PYTEST_ADDOPTS")}
    env.update({ARTIFACTS_ENV: str(artifacts), "EXAMPLES_LOG": str(log), "PYTHONPATH": str(REPO_ROOT)})
    if seed is not None:
        env[SEED_ENV] = seed
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.replay",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            f"--hypothesis-profile={profile}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, artifacts, log


def test_a_failed_long_test_prints_its_seed_and_notes_and_keeps_them(tmp_path: Path) -> None:
    # Given a hypothesis test marked long that fails for some schedules, run with no seed set
    proc, artifacts, _ = _run(tmp_path, "first", seed=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # Then stderr names the replay command with the session's seed, the notes and the artifacts
    match = re.search(rf"replay: {SEED_ENV}=(\d+) \S+ -p no:cacheprovider '(\S+)'", proc.stderr)
    assert match, proc.stderr
    seed, nodeid = match.groups()
    assert nodeid == "test_inner.py::test_schedule_long"
    assert '  event_id: "evt-0001"' in proc.stderr
    # and the artifacts directory keeps the same, with the shrunk failing schedule
    (kept,) = artifacts.iterdir()
    assert f"artifacts: {kept}" in proc.stderr
    record = json.loads((kept / "replay.json").read_text())
    assert record["seed"] == seed
    assert record["notes"]["event_id"] == "evt-0001"
    assert sum(record["notes"]["schedule"]) >= 150
    assert "AssertionError" in (kept / "failure.txt").read_text()
    # and the terminal summary points there too; a passing long test and a failure with no notes keep nothing
    assert "replay the failed tests" in proc.stdout
    assert "test_passing_long" not in proc.stderr
    assert "test_failing_without_notes" not in proc.stderr


def test_the_printed_seed_replays_the_same_examples(tmp_path: Path) -> None:
    # Given a first run, and its seed
    _, artifacts, first_log = _run(tmp_path, "first", seed=None)
    (kept,) = artifacts.iterdir()
    seed = json.loads((kept / "replay.json").read_text())["seed"]
    # When the test is run again with that seed
    _, _, again_log = _run(tmp_path, "again", seed=seed)
    # Then hypothesis tries the very same schedules, in the same order
    assert again_log.read_text() == first_log.read_text()
    _, _, other_log = _run(tmp_path, "other", seed=str(int(seed) + 1))
    assert other_log.read_text() != first_log.read_text()


def test_a_derandomized_ci_run_prints_a_replay_that_asks_for_the_ci_profile(tmp_path: Path) -> None:
    # Given a run under Hypothesis's ci profile (what CI=true loads: examples from the test, not the seed)
    proc, artifacts, first_log = _run(tmp_path, "ci", seed=None, profile="ci")
    (kept,) = artifacts.iterdir()
    command = json.loads((kept / "replay.json").read_text())["replay"]
    # Then the printed replay asks for that profile
    assert "--hypothesis-profile=ci" in command, command
    assert f"replay: {command}" in proc.stderr
    # and a run under it, whatever the seed, tries the very same schedules
    _, _, again_log = _run(tmp_path, "ci-again", seed="1", profile="ci")
    assert again_log.read_text() == first_log.read_text()
