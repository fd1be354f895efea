"""Replaying a failed long test: its seed, schedule and event ids, and its artifacts, where CI shows them.

A pytest plugin (tests/conftest.py loads it):

- every session draws hypothesis's examples from one seed, ``GPUWARDEN_TEST_SEED`` (a random one
  when unset, handed to xdist workers through the environment; ``--hypothesis-seed`` wins), so a
  run can be repeated example for example;
- a test notes what else it needs to be replayed with :func:`note` (the fault schedule, the event
  id — the latest value of each key wins, so a shrunk hypothesis failure leaves its minimal
  example) and files to keep with :func:`keep`;
- when a test marked ``long`` fails, or any test that noted something, the plugin writes the
  replay command, the seed and the notes to stderr and to the failure's report (a ``replay``
  section), and keeps ``replay.json``, the failure text, the kept files and the test's
  ``tmp_path`` in ``test-artifacts/<test>/`` (``GPUWARDEN_TEST_ARTIFACTS`` moves it), which the
  terminal summary names.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SEED_ENV = "GPUWARDEN_TEST_SEED"
ARTIFACTS_ENV = "GPUWARDEN_TEST_ARTIFACTS"
SECTION = "replay"

_NOTES = pytest.StashKey[dict[str, Any]]()
_KEPT = pytest.StashKey[list[Path]]()
_current: list[pytest.Item] = []  # the test running in this process (one at a time per worker)


def note(**facts: Any) -> None:
    """Record facts that replay the running test (JSON-able; the latest value of each key wins)."""
    if _current:
        _current[-1].stash.setdefault(_NOTES, {}).update(facts)


def keep(*paths: Path) -> None:
    """Files to keep with the running test's artifacts if it fails."""
    if _current:
        _current[-1].stash.setdefault(_KEPT, []).extend(paths)


def artifacts_root() -> Path:
    return Path(os.environ.get(ARTIFACTS_ENV) or REPO_ROOT / "test-artifacts")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # before hypothesis's own pytest_configure reads --hypothesis-seed
    seed = os.environ.get(SEED_ENV) or str(secrets.randbelow(2**32))
    os.environ[SEED_ENV] = seed  # xdist workers start later, from this environment
    if getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = seed


def pytest_report_header(config: pytest.Config) -> str:
    return f"{SEED_ENV}={os.environ.get(SEED_ENV)} (hypothesis examples, Karpenter race interleavings)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    _current.append(item)
    try:
        yield
    finally:
        _current.remove(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    notes = item.stash.get(_NOTES, {})
    if not report.failed or (item.get_closest_marker("long") is None and not notes):
        return
    text = _keep_artifacts(item, report, notes)
    report.sections.append((SECTION, text))
    sys.__stderr__.write(f"\n{text}\n")  # type: ignore[union-attr]  # also when output is captured


def pytest_terminal_summary(terminalreporter: Any) -> None:
    replays = [
        content
        for report in terminalreporter.stats.get("failed", [])
        for name, content in getattr(report, "sections", [])
        if name == SECTION
    ]
    if replays:
        terminalreporter.section("replay the failed tests")
        for content in replays:
            terminalreporter.write_line(content)


def _profile_option() -> str:
    """Under CI (the ``CI`` variable and its kin) Hypothesis loads its ``ci`` profile, which is
    derandomized: the examples come from the test itself, not from the seed. A replay on another
    machine must ask for that profile, or it would try other examples than the failed run did."""
    from hypothesis import settings

    active = settings.default
    return " --hypothesis-profile=ci" if active is not None and active.derandomize else ""


def _keep_artifacts(item: pytest.Item, report: pytest.TestReport, notes: dict[str, Any]) -> str:
    seed = str(item.config.getoption("hypothesis_seed", None) or os.environ.get(SEED_ENV, ""))
    folder = artifacts_root() / re.sub(r"[^\w.-]+", "_", item.nodeid)[-150:]
    folder.mkdir(parents=True, exist_ok=True)
    command = f"{SEED_ENV}={seed} .venv/bin/pytest{_profile_option()} -p no:cacheprovider '{item.nodeid}'"
    record = {"test": item.nodeid, "phase": report.when, "seed": seed, "replay": command, "notes": notes}
    (folder / "replay.json").write_text(json.dumps(record, indent=2, default=str))
    (folder / "failure.txt").write_text(report.longreprtext)
    for path in item.stash.get(_KEPT, []):
        if path.is_file():
            shutil.copy2(path, folder / path.name)
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if isinstance(tmp_path, Path) and tmp_path.is_dir():
        shutil.copytree(tmp_path, folder / "tmp_path", dirs_exist_ok=True)
    lines = [f"replay: {command}", f"  seed (hypothesis examples): {seed}"]
    lines += [f"  {key}: {json.dumps(value, default=str)[:4000]}" for key, value in notes.items()]
    lines.append(f"  artifacts: {folder}")
    return "\n".join(lines)
