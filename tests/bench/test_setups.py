"""Every benchmark of `make bench` runs: each one's set-up executed once, at its smallest sizes
(`python -m tests.bench.run --smallest`), so that a change to settings or wiring that stops a
benchmark from running fails `make test` instead of silently taking a figure out of the table.

The figures are not judged (nothing is timed in a test): each benchmark must answer every one of
its figures, with at least one sample. A benchmark that cannot run here for a reason it states
(no `kubectl`, no layer build) is skipped with that reason, as `make bench` reports it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator

import pytest

from tests.bench.common import Skipped
from tests.bench.run import BENCHES, run_one


@pytest.fixture
def bench_process() -> Iterator[None]:
    """The benchmarks run in this process as in `make bench`'s: put back what they change in it
    (the environment, the handlers' log level and stream)."""
    from gpuwarden.observability import logger

    environ = dict(os.environ)
    handlers = logging.getLogger(logger.service).handlers
    streams = [(h, h.stream) for h in handlers if isinstance(h, logging.StreamHandler)]
    level = logger.log_level
    yield
    os.environ.clear()
    os.environ.update(environ)
    for handler, stream in streams:
        handler.setStream(stream)
    logger.setLevel(level)


@pytest.mark.parametrize("name", list(BENCHES))
@pytest.mark.usefixtures("bench_process")
def test_the_benchmark_runs_at_its_smallest_sizes(name: str) -> None:
    try:
        figures, details = run_one(name, smallest=True)
    except Skipped as reason:
        pytest.skip(f"make bench skips {name} here too: {reason}")
    assert figures, f"{name}: no figure"
    for found in figures:
        assert found.runs >= 1, found
        assert not math.isnan(found.value), found
    if name == "realplane":
        # what the real plane's runs wrote is read back from the cluster: nothing lost, even here
        assert details["lost"] == 0, details
        assert details["cold"]["lost"] == 0, details["cold"]
