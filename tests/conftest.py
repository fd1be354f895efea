"""Session-wide test plugins: tests/replay.py (seed, notes and artifacts of failed long tests), and
the hang detector of `long` tests (docs/reliability.md, "Long runs")."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.replay"]

#: A `long` test's pytest-timeout is a hang detector, not a budget: its work is bounded by what it
#: does (examples, processes, simulated time), and the machine's load only stretches it. In two
#: `make test-long` runs at load 5-8 the 200 fault schedules took 285 s and 227 s and the built-in
#: week 428 s and 481 s: the default 300 s cut the first under load, and would cut the second at
#: that load. The thread method dumps every thread's stack and ends the worker: the signal method
#: raised `Failed` inside whichever hypothesis example was running, its replay passed, and
#: hypothesis reported a FlakyFailure that was no failure of the example.
LONG_HANG_SECONDS = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("long") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LONG_HANG_SECONDS, method="thread"))
