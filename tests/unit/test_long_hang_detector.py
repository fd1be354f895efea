"""A `long` test's pytest-timeout is the hang detector of tests/conftest.py, unless it sets its own
(docs/reliability.md, "Long runs")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import LONG_HANG_SECONDS

REPO_ROOT = Path(__file__).resolve().parents[2]

INNER = """
import pytest

def _timeout(request):
    marker = request.node.get_closest_marker("timeout")
    return (marker.args, marker.kwargs) if marker else None

@pytest.mark.long
def test_long(request):
    print("long:", _timeout(request))

@pytest.mark.long
@pytest.mark.timeout(7)
def test_long_with_its_own(request):
    print("own:", _timeout(request))

def test_default(request):
    print("default:", _timeout(request))
"""


def test_long_tests_get_the_hang_detector_and_others_keep_theirs(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long: long\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"long: (({LONG_HANG_SECONDS},), {{'method': 'thread'}})" in proc.stdout, proc.stdout
    assert "own: ((7,), {})" in proc.stdout, proc.stdout
    assert "default: None" in proc.stdout, proc.stdout
