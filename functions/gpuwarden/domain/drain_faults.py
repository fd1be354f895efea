"""What a failed drain workflow round becomes: a retry, the end with what is left, or a failure
(docs/architecture.md, "The drain workflow").

A round that raises is mapped to one error name the workflow knows:

- `DrainClusterUnreachable`, `DrainApiRetriesExhausted`, `DrainConflictsExhausted`: retried by the
  workflow with backoff (`RETRY`), while the notice's deadline allows it (an involuntary kind) or
  up to `VOLUNTARY_RETRIES` times (a voluntary kind, or one without a deadline);
- `DrainGaveUp`: the same faults once that room is spent; the workflow ends in `NotDrained`, whose
  cause is this message: the node and what is left on it;
- anything else (a setting it does not understand, a 403, an input that does not parse) is not
  mapped: retrying cannot fix it, and the execution fails at once.

Pure: the caller passes the facts (the time, the retries so far, what the last round saw).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuwarden.domain.errors import (
    ClusterUnreachable,
    Conflict,
    DrainApiRetriesExhausted,
    DrainClusterUnreachable,
    DrainConflictsExhausted,
    DrainGaveUp,
    DrainInterrupted,
    GpuwardenError,
    KubeError,
    WriteConflicts,
)
from gpuwarden.domain.wording import count


@dataclass(frozen=True)
class RetryPolicy:
    """One Step Functions Retry rule (the synthesized workflow carries exactly these numbers)."""

    interval_seconds: int
    backoff_rate: float
    max_delay_seconds: int
    max_attempts: int

    def delay(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (0-based), before full jitter."""
        return float(min(self.max_delay_seconds, self.interval_seconds * self.backoff_rate**retry))


#: The workflow's Retry of the three transient names: 1 s, 2, 4, 8, then every 10 s; enough attempts
#: to cover the workflow's 6 h (the deadline, not this number, is the bound that matters).
RETRY = RetryPolicy(interval_seconds=1, backoff_rate=2.0, max_delay_seconds=10, max_attempts=2200)
#: A voluntary kind (or one with no deadline) is retried this many times (about 3 minutes), then
#: given up: nothing forces its drain, and the next notice or window can take it again.
VOLUNTARY_RETRIES = 20
#: An involuntary drain keeps retrying this long past its deadline (the instance may outlive it a
#: little, as `drain_node` keeps evicting for `_PAST_DEADLINE_GRACE`).
PAST_DEADLINE_SECONDS = 30.0

#: The error names the workflow retries.
TRANSIENT: tuple[type[DrainInterrupted], ...] = (
    DrainClusterUnreachable,
    DrainApiRetriesExhausted,
    DrainConflictsExhausted,
)


def transient_kind(err: GpuwardenError) -> type[DrainInterrupted] | None:
    """The retried name of a fault retrying may fix, by its type (and HTTP status); None otherwise."""
    if isinstance(err, ClusterUnreachable):
        return DrainClusterUnreachable
    if isinstance(err, WriteConflicts | Conflict):
        return DrainConflictsExhausted
    if isinstance(err, KubeError) and (err.status is None or err.status == 429 or err.status >= 500):
        return DrainApiRetriesExhausted
    return None


@dataclass(frozen=True)
class RoundFacts:
    """What the failed round's input said: the node, its kind's class and deadline, what is left."""

    node: str
    voluntary: bool
    deadline: datetime | None
    left: Sequence[str]
    remaining: int


def may_retry(facts: RoundFacts, retries: int, now: datetime) -> bool:
    """Room for another attempt: before the deadline (+ the grace) when there is one and the kind is
    involuntary; otherwise fewer than `VOLUNTARY_RETRIES` retries so far."""
    if not facts.voluntary and facts.deadline is not None:
        return now <= facts.deadline + timedelta(seconds=PAST_DEADLINE_SECONDS)
    return retries < VOLUNTARY_RETRIES


def left_on_node(facts: RoundFacts) -> str:
    if not facts.left and not facts.remaining:
        return "not yet counted (no round finished)"
    shown = "; ".join(facts.left[:10])
    return f"{count(facts.remaining, 'pod')}: {shown}" if shown else f"{count(facts.remaining, 'pod')}"


def drain_failure(err: GpuwardenError, facts: RoundFacts, *, retries: int, now: datetime) -> GpuwardenError:
    """The error the drain workflow's function raises for ``err`` (module docstring)."""
    kind = transient_kind(err)
    if kind is None:
        return err
    what = f"{type(err).__name__}: {err}"
    if may_retry(facts, retries, now):
        return kind(f"node {facts.node}: {what} (retry {retries + 1})")
    bound = (
        f"deadline {facts.deadline.isoformat()} passed"
        if not facts.voluntary and facts.deadline is not None
        else f"{retries} retries spent"
    )
    return DrainGaveUp(
        f"node {facts.node} not drained ({bound}); last error {what}; left on the node: {left_on_node(facts)}"
    )
