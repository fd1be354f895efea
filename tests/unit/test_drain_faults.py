"""The drain workflow function's mapping from a failed round's error to the names the workflow knows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuwarden.domain.drain_faults import VOLUNTARY_RETRIES, RoundFacts, drain_failure
from gpuwarden.domain.errors import (
    ClusterUnreachable,
    Conflict,
    DrainApiRetriesExhausted,
    DrainClusterUnreachable,
    DrainConflictsExhausted,
    DrainGaveUp,
    GpuwardenError,
    InvalidPolicy,
    KubeError,
    WriteConflicts,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
LEFT = ["ml/train-0-worker: checkpointing", "serving/inference-0: PDB"]


def facts(*, voluntary: bool = False, deadline: datetime | None = NOW + timedelta(seconds=90)) -> RoundFacts:
    return RoundFacts(node="ip-10-0-1-23", voluntary=voluntary, deadline=deadline, left=LEFT, remaining=2)


@pytest.mark.parametrize(
    ("err", "name"),
    [
        (ClusterUnreachable("connection refused"), DrainClusterUnreachable),
        (KubeError("GET /api/v1/nodes/x: 503 (after 6 attempts)", status=503), DrainApiRetriesExhausted),
        (KubeError("GET /api/v1/pods: 429 (after 6 attempts)", status=429), DrainApiRetriesExhausted),
        (KubeError("GET /api/v1/pods: ProtocolError (after 6 attempts)"), DrainApiRetriesExhausted),
        (WriteConflicts("node x", 8), DrainConflictsExhausted),
        (Conflict("PATCH node x: conflict", status=409), DrainConflictsExhausted),
    ],
)
def test_a_fault_retrying_may_fix_is_raised_under_its_retried_name_before_the_deadline(
    err: GpuwardenError, name: type[GpuwardenError]
) -> None:
    mapped = drain_failure(err, facts(), retries=3, now=NOW)
    assert type(mapped) is name
    assert "ip-10-0-1-23" in str(mapped)


@pytest.mark.parametrize(
    "err",
    [
        KubeError("PATCH /api/v1/nodes/x: 403 forbidden", status=403),
        KubeError("POST eviction: 400 bad request", status=400),
        InvalidPolicy("drain.max_backoff_seconds: not a number"),
    ],
)
def test_an_error_retrying_cannot_fix_is_raised_as_is_and_fails_the_execution(err: GpuwardenError) -> None:
    assert drain_failure(err, facts(), retries=0, now=NOW) is err


def test_an_involuntary_drain_retries_until_its_deadline_then_gives_up_naming_what_is_left() -> None:
    err = ClusterUnreachable("connection refused")
    # long past any retry count, but before the deadline (+ its grace): still retried
    later = NOW + timedelta(seconds=110)
    assert isinstance(drain_failure(err, facts(), retries=500, now=later), DrainClusterUnreachable)
    # past the deadline's grace: given up, with what is left on the node
    gave_up = drain_failure(err, facts(), retries=1, now=NOW + timedelta(seconds=200))
    assert isinstance(gave_up, DrainGaveUp)
    text = str(gave_up)
    assert "deadline" in text
    assert "2 pods: ml/train-0-worker: checkpointing; serving/inference-0: PDB" in text


def test_a_voluntary_drain_retries_a_bounded_number_of_times() -> None:
    err = KubeError("GET: 503", status=503)
    voluntary = facts(voluntary=True, deadline=None)
    assert isinstance(drain_failure(err, voluntary, retries=VOLUNTARY_RETRIES - 1, now=NOW), DrainApiRetriesExhausted)
    gave_up = drain_failure(err, voluntary, retries=VOLUNTARY_RETRIES, now=NOW)
    assert isinstance(gave_up, DrainGaveUp)
    assert f"{VOLUNTARY_RETRIES} retries spent" in str(gave_up)


def test_an_involuntary_kind_without_a_deadline_is_bounded_like_a_voluntary_one() -> None:
    err = ClusterUnreachable("refused")
    assert isinstance(drain_failure(err, facts(deadline=None), retries=VOLUNTARY_RETRIES, now=NOW), DrainGaveUp)
