"""`drain_node`: one re-entrant round of a drain (never a sleep loop in Lambda: docs/architecture.md).

The cluster is the state: which pods are still on the node, what they acknowledged. A
round evicts what may go, retries what a PDB refused, deletes at per-pod deadlines for
involuntary kinds, and answers how long to wait before the next round.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType, DrainOutcome, EvictionResult
from gpuwarden.domain.checkpoint import current_request
from gpuwarden.domain.drain import (
    CHECKPOINT_TIMED_OUT,
    MIN_GRACE_SECONDS,
    DrainContext,
    PodStep,
    decide_round,
    hold_until,
    leave_order,
    on_eviction_blocked,
)
from gpuwarden.domain.drain_faults import RoundFacts
from gpuwarden.domain.errors import NotFound
from gpuwarden.domain.gang_progress import GangHold, Looks
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.observability import Metric, put
from gpuwarden.services.engine.checkpoint import Asking, PreparePod, request_checkpoints
from gpuwarden.services.engine.context import Recorder, worker_pool
from gpuwarden.services.engine.gangs import gang_round
from gpuwarden.services.engine.node_ops import pods_on

#: After the deadline the instance is gone; keep trying this long for what the API still lists.
_PAST_DEADLINE_GRACE = 30.0


class DrainState(BaseModel):
    """What the Step Functions loop passes from one round to the next (and the CLI keeps in-process)."""

    node: str
    event_id: str
    kind: Kind
    deadline: datetime | None = None
    #: Karpenter's own forced moment for the node, on a kind whose protections hold until then
    #: (`domain.protections`: an expiry's + terminationGracePeriod; None there: never).
    forced_at: datetime | None = None
    #: The notice's own time (`checkpoint.current_request`: an acknowledgement before it is another's).
    notice_time: datetime | None = None
    started_at: datetime
    round: int = 0
    blocked_rounds: int = 0
    done: bool = False
    wait_seconds: float = 0.0
    outcome: DrainOutcome = DrainOutcome.DRAINING
    remaining: int = 0
    waiting: list[str] = []
    blocked: list[str] = []
    #: The same, typed: the pods a PDB refuses now, and how many pods wait on what (`drain.WaitsOn`:
    #: their own checkpoint, their gang's, a grace period already given, their turn).
    blocked_pods: list[str] = []
    waiting_on: dict[str, int] = {}
    seconds_left: float | None = None
    #: Opted-in pods seen on the node in any round, and those seen acknowledged: when the node is
    #: gone early (Karpenter finished it, the instance went), what was and was not checkpointed.
    opted_in: list[str] = []
    checkpointed: list[str] = []
    not_checkpointed: list[str] = []


def round_facts(recorder: Recorder, state: DrainState) -> RoundFacts:
    """What a failed round's input says (`domain.drain_faults`): the node, its kind's class and
    deadline, what is left on it."""
    return RoundFacts(
        node=state.node,
        voluntary=recorder.deps.is_voluntary(state.kind),
        deadline=state.deadline,
        left=[*state.blocked, *state.waiting],
        remaining=state.remaining,
    )


@dataclass(frozen=True)
class Round:
    """What one round answers: the drain's next state, and where the node's gangs stand."""

    state: DrainState
    looks: Looks = field(default_factory=Looks)


def _evict(recorder: Recorder, node: NodeView, pod: PodView, step: PodStep, ctx: DrainContext) -> PodStep:
    kube = recorder.deps.kube
    namespace, name = pod.namespace, pod.name
    if step.step == "delete":
        grace = max(MIN_GRACE_SECONDS, pod.grace_seconds if step.grace_seconds is None else step.grace_seconds)
        if kube.delete_pod(namespace, name, pod.uid, grace):
            recorder.add(ActionType.DELETE, node, pod=pod.key, reason=step.reason, grace_seconds=grace)
        return step
    outcome = kube.evict_pod(namespace, name, pod.uid, step.grace_seconds)
    if outcome.result == EvictionResult.EVICTED:
        recorder.add(ActionType.EVICT, node, pod=pod.key, reason=step.reason, grace_seconds=step.grace_seconds)
        if step.reason == CHECKPOINT_TIMED_OUT and not recorder.deps.dry_run:
            put(Metric.CHECKPOINT_TIMEOUTS)
        return step
    if outcome.result == EvictionResult.GONE:
        return PodStep(pod.key, "skip", "gone")
    follow = on_eviction_blocked(pod, ctx, outcome.message, because=step.reason)
    recorder.add(ActionType.EVICTION_BLOCKED, pod=pod.key, reason=outcome.message)
    if follow.step == "delete":
        return _evict(recorder, node, pod, follow, ctx)
    return follow


def _context(
    state: DrainState, recorder: Recorder, now: datetime, gangs: Mapping[str, GangHold] | None = None
) -> DrainContext:
    policy = recorder.deps.policy
    return DrainContext(
        gangs=gangs or {},
        event_id=state.event_id,
        involuntary=not recorder.deps.is_voluntary(state.kind),
        deadline=state.deadline,
        kind=state.kind,
        forced_at=state.forced_at,
        notice_time=state.notice_time,
        now=now,
        default_checkpoint_timeout=policy.checkpoint.default_timeout_seconds,
        allow_exec=policy.checkpoint.allow_exec,
    )


def _next_wait(state: DrainState, steps: list[PodStep], max_backoff: float) -> float:
    if any(s.blocked for s in steps):
        return float(min(max_backoff, 0.5 * 2 ** min(state.blocked_rounds, 6)))
    return 0.5


def drain_node(
    recorder: Recorder,
    state: DrainState,
    node: NodeView | None,
    pool: ThreadPoolExecutor | None = None,
    prepare: PreparePod | None = None,
) -> Round:
    """One round on the node as the round already read it (None: it is gone): the next state
    (`done` when only skipped pods remain, or the node is gone), and the round's look at the
    node's gangs."""
    deps = recorder.deps
    state = state.model_copy(update={"round": state.round + 1})
    if node is None:  # its pods may still be listed: what they acknowledged before it went counts
        state = seen(state, pods_on(deps.kube, state.node), deps.clock())
        return Round(_gone_early(recorder, state, deps.clock()))
    pods = pods_on(deps.kube, state.node)
    state = seen(state, pods, deps.clock())
    by_key = {p.key: p for p in pods}
    own_pool = pool is None
    pool = pool or worker_pool()
    try:
        # the node's gangs first: a gang's pod here leaves only once its gang has checkpointed
        asking = Asking(
            recorder, node, state.deadline, pool, prepare, since=state.notice_time, joined_since=state.started_at
        )
        gangs = gang_round(asking, pods)
        now = deps.clock()  # the time of the observation the round decides on
        ctx = _context(state, recorder, now, gangs.holds)
        steps = decide_round(pods, ctx)
        late = [by_key[s.pod] for s in steps if s.step == "signal" and s.pod not in gangs.asked]
        if late:
            request_checkpoints(asking, late)
        results: list[PodStep] = []
        for wave in leave_order(steps, by_key):  # lowest priority first, one wave answered before the next
            results += pool.map(lambda s: _evict(recorder, node, by_key[s.pod], s, ctx), wave)
    finally:
        if own_pool:
            pool.shutdown(wait=True)
    final = {s.pod: s for s in steps} | {r.pod: r for r in results}
    next_state = _progress(recorder, state, node, list(final.values()), now)
    due = _next_due(state, list(final.values()), by_key, ctx)
    if not (next_state.done or due is None or due >= next_state.wait_seconds):
        next_state = next_state.model_copy(update={"wait_seconds": max(0.05, due)})
    return Round(next_state, gangs.looks)


def seen(state: DrainState, pods: list[PodView], now: datetime) -> DrainState:
    """Remember the opted-in pods and their acknowledgements (the node may not be there next round);
    an acknowledgement of the gang's request another notice made counts. Also the first
    invocation's pods, when the drain starts: a drain handed on before any round (a Spot warning)
    still knows whom it asked, should the node be gone at its first round."""
    opted = [p.key for p in pods if ann.CHECKPOINT in p.annotations and p.key not in state.opted_in]
    acked = [
        p.key
        for p in pods
        if (r := current_request(p, state.event_id, now, state.notice_time)) is not None
        and r.done
        and p.key not in state.checkpointed
    ]
    if not opted and not acked:
        return state
    return state.model_copy(update={"opted_in": state.opted_in + opted, "checkpointed": state.checkpointed + acked})


def _gone_early(recorder: Recorder, state: DrainState, now: datetime) -> DrainState:
    """The node went before the drain saw it empty (Karpenter finished it, or the instance went):
    not a failure; the result says what was and was not checkpointed."""
    missing = [k for k in state.opted_in if k not in state.checkpointed]
    seconds_left = (state.deadline - now).total_seconds() if state.deadline else None
    reason = (
        f"node {state.node} was removed before the drain finished (Karpenter, or the instance went); "
        f"checkpointed: {', '.join(state.checkpointed) or 'none'}; not checkpointed: {', '.join(missing) or 'none'}"
    )
    recorder.add(ActionType.NODE_GONE, reason=reason, checkpointed=state.checkpointed, not_checkpointed=missing)
    recorder.flush()
    update = {
        "done": True,
        "outcome": DrainOutcome.GONE_EARLY,
        "seconds_left": seconds_left,
        "not_checkpointed": missing,
    }
    return state.model_copy(update=update)


def _next_due(state: DrainState, steps: list[PodStep], pods: dict[str, PodView], ctx: DrainContext) -> float | None:
    """Seconds until the first per-pod time the backoff must not sleep past (involuntary): a blocked
    pod's `deadline - grace` (deleted then, or it would get less grace than it asked for) and a
    held pod's `hold_until` (asked to leave then, whatever lower-priority pods still do)."""
    deadline = ctx.hard_deadline  # on an expiry, Karpenter's forced moment (`domain.protections`)
    if not ctx.involuntary or deadline is None:
        return None
    times = [deadline - timedelta(seconds=pods[s.pod].grace_seconds) for s in steps if s.blocked]
    times += [t for s in steps if s.held_for is not None and (t := hold_until(pods[s.pod], ctx)) is not None]
    return min(((t - ctx.now).total_seconds() for t in times), default=None)


def _progress(recorder: Recorder, state: DrainState, node: NodeView, steps: list[PodStep], now: datetime) -> DrainState:
    remaining = [s for s in steps if s.step != "skip"]
    blocked = [f"{s.pod}: {s.reason}" for s in remaining if s.blocked]
    waiting = [f"{s.pod}: {s.reason}" for s in remaining if s.step == "wait" and not s.blocked]
    seconds_left = (state.deadline - now).total_seconds() if state.deadline else None
    state = state.model_copy(
        update={
            "remaining": len(remaining),
            "blocked": blocked,
            "waiting": waiting,
            "blocked_pods": [s.pod for s in remaining if s.blocked],
            "waiting_on": dict(Counter(s.waits_on for s in remaining if s.waits_on is not None and not s.blocked)),
            "seconds_left": seconds_left,
            "blocked_rounds": state.blocked_rounds + 1 if blocked else 0,
        }
    )
    if not remaining:
        return _finish(recorder, state, node, now, "every pod that must go is gone")  # flushes the Events
    recorder.flush()
    if seconds_left is not None and seconds_left < -_PAST_DEADLINE_GRACE:
        # what is still on the node (blocked, waiting, or leaving with the grace that was left) and
        # which opted-in pods never checkpointed: a deadline that passed before gpuwarden began too
        missing = [k for k in state.opted_in if k not in state.checkpointed]
        still = blocked or waiting
        where = (
            f"still on the node: {'; '.join(still[:5])}"
            if still
            else f"sent away at once: {', '.join(s.pod for s in remaining[:5])}{', …' if len(remaining) > 5 else ''}"
        )
        reason = f"deadline passed {-seconds_left:.0f}s ago; {where}; not checkpointed: {', '.join(missing) or 'none'}"
        recorder.add(ActionType.DRAIN_BLOCKED, node, reason=reason, not_checkpointed=missing)
        recorder.flush()
        put(Metric.DRAINS_PAST_DEADLINE)
        update = {"done": True, "outcome": DrainOutcome.DEADLINE_PASSED, "not_checkpointed": missing}
        return state.model_copy(update=update)
    limit = recorder.deps.policy.drain.voluntary_limit_seconds
    if recorder.deps.is_voluntary(state.kind) and (now - state.started_at).total_seconds() > limit:
        recorder.add(ActionType.DRAIN_BLOCKED, node, reason=f"not drained after {limit}s: " + "; ".join(blocked[:5]))
        recorder.flush()
        return state.model_copy(update={"done": True, "outcome": DrainOutcome.BLOCKED})
    wait = _next_wait(state, steps, recorder.deps.policy.drain.max_backoff_seconds)
    return state.model_copy(update={"wait_seconds": wait})


def _finish(recorder: Recorder, state: DrainState, node: NodeView | None, now: datetime, why: str) -> DrainState:
    seconds_left = (state.deadline - now).total_seconds() if state.deadline else None
    drained_in = (now - state.started_at).total_seconds()
    first = node is not None and node.annotations.get(ann.DRAIN_COMPLETED) is None
    details: dict[str, Any] = {"reason": why, "seconds": round(drained_in, 3)}
    if seconds_left is not None:
        details["seconds_left"] = round(seconds_left, 3)
    # Recorded when the round saw the node empty, before the bookkeeping write below (which
    # faults may slow down). The Kubernetes Event goes with the first completion only.
    recorder.add(ActionType.DRAIN_COMPLETE, node if first else None, **details)
    if node is not None and first and not recorder.deps.dry_run:
        patch = {"metadata": {"annotations": {ann.DRAIN_COMPLETED: ann.rfc3339(now)}}}
        with contextlib.suppress(NotFound):  # Karpenter may finish the node the moment it is empty
            recorder.deps.kube.patch_node(node.name, patch, None)
    recorder.flush()
    if not recorder.deps.dry_run:
        put(Metric.DRAIN_SECONDS, drained_in, "Seconds")
        if seconds_left is not None:
            put(Metric.SECONDS_LEFT_AT_DRAIN_END, seconds_left, "Seconds")
            if seconds_left < 0:
                put(Metric.DRAINS_PAST_DEADLINE)
    outcome = DrainOutcome.DRAINED if seconds_left is None or seconds_left >= 0 else DrainOutcome.DRAINED_LATE
    missing = [k for k in state.opted_in if k not in state.checkpointed]  # timed out, failed, or taken by another
    update = {"done": True, "outcome": outcome, "seconds_left": seconds_left, "not_checkpointed": missing}
    return state.model_copy(update=update)
