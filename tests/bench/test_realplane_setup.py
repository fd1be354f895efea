"""The real-plane benchmark's set-up runs (`make test`): its smallest sizes, every figure answered
with a sample, nothing judged (nothing is timed in a test: the figures live in `make bench`)."""

from __future__ import annotations

import math

import pytest

from tests.bench import realplane
from tests.bench.common import Skipped


def test_the_real_plane_benchmark_runs_at_its_smallest_sizes() -> None:
    try:
        figures, details = realplane.measure(**realplane.SMALLEST)
    except Skipped as reason:
        pytest.skip(f"make bench skips it here too: {reason}")
    names = [f.name for f in figures]
    assert any("cordoned (p50)" in n for n in names), names
    assert any("every checkpoint request" in n for n in names), names
    for found in figures:
        assert found.runs >= 1, found
        assert not math.isnan(found.value), found
    assert details["lost"] == 0, details
