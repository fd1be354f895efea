"""One run of the sequence on one node, stage by stage (docs/architecture.md, "The pipeline"):
admission (`guard_and_mark`: guards, the mark, `after_mark`), delivery (`run_steps`: the checkpoint
requests, the replacement, the first drain rounds, then the drain workflow or the local loop), and
`hand_on` when a failure after the mark leaves the drain to the workflow. The kind's hooks
(`engine.hooks`) change each stage; the rounds after these are `engine.rounds`.

Inside Lambda every wait here is cut to the invocation's time budget (`Deps.remaining`): what
does not fit is handed to the drain workflow, whose rounds are re-entrant.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.drain_faults import transient_kind
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.gang_progress import Looks
from gpuwarden.domain.protections import forced_at_of
from gpuwarden.domain.views import PodView
from gpuwarden.services.engine.checkpoint import Asking
from gpuwarden.services.engine.context import worker_pool
from gpuwarden.services.engine.drain import DrainState, Round, seen
from gpuwarden.services.engine.gangs import ask_gangs
from gpuwarden.services.engine.hooks import Disruption, Marked, Ran, Steps
from gpuwarden.services.engine.node_ops import give_back, mark_node
from gpuwarden.services.engine.plan import notice_plan, record_would_drain
from gpuwarden.services.engine.replace import drop_claim, ensure_replacement, gang_peers
from gpuwarden.services.engine.result import KARPENTER
from gpuwarden.services.engine.rounds import drain_to_end, round_of

#: How long the first drain round and the replacement wait for the checkpoint requests to be out.
REQUESTS_FIRST_SECONDS = 5.0


def guard_and_mark(d: Disruption, why: str, claim: str | None = None) -> Marked:
    """Guards, then the mark (recorded as `cordon` when this run wrote it; with ``claim``, the
    replacement's claim in the same write), then `after_mark`."""
    resumed = d.node.annotations.get(ann.EVENT_ID) == d.notice.event_id
    refused = d.hooks.admission.guard(d)
    if refused is not None:
        return Marked(d.node, refused=refused, resumed=resumed)
    voluntary = d.deps.voluntary_kinds
    mark = mark_node(
        d.deps.kube, d.node, d.notice, voluntary=voluntary, extra=d.hooks.admission.mark_extra(d), claim=claim
    )
    if mark.held_by is not None:
        return Marked(mark.node, held_by=mark.held_by, resumed=resumed)
    d.node = mark.node
    d.claimed = mark.changed and claim is not None and d.node.annotations.get(ann.REPLACEMENT) == claim
    if mark.changed:
        taint = f"{ann.TAINT_KEY}={d.notice.kind.value}:NoSchedule"
        d.recorder.add(ActionType.CORDON, d.node, taint=taint, reason=why)
    refused = d.hooks.admission.after_mark(d)
    if refused is not None:
        give_back(d.recorder, d.node.name, d.notice.event_id, refused)
        return Marked(d.node, changed=mark.changed, refused=refused, resumed=resumed)
    return Marked(d.node, changed=mark.changed, resumed=resumed)


def run_steps(d: Disruption, steps: Steps) -> Ran:
    """Urgent deliveries, replacement, first rounds; then the drain workflow or the local loop."""
    deps = d.deps
    state = _start(d) if steps.drain and not deps.dry_run else None
    looks = Looks()
    handed_off = False
    with worker_pool() as pool:
        deliveries: list[Future[None]] = []
        sent = threading.Event()  # the urgent work first: rounds and replacement wait for the requests
        peers = None
        if steps.checkpoint:
            # the node's pods and every gang they belong to, each pod asked once (docs/training-jobs.md)
            asking = Asking(
                d.recorder,
                d.node,
                d.notice.deadline,
                pool,
                d.hooks.delivery.prepare_pod,
                d.fan_out,
                d.notice.event_time,
            )
            asked = ask_gangs(asking, d.pods, sent, d.gangs)
            deliveries, looks, peers = asked.deliveries, asked.looks, gang_peers(d.gangs, d.pods)
        else:
            sent.set()
        if steps.replace:
            deliveries.append(pool.submit(_replace, d, sent, peers))
        if state is not None:  # no pod is asked to leave before every checkpoint request is out
            sent.wait(deps.time_left(REQUESTS_FIRST_SECONDS))
            state = seen(state, d.pods_listed, deps.clock())  # whom it asked, even if handed on now
        if state is not None and d.hooks.delivery.hand_off_at_once and _hand_off(d, state):
            handed_off = True
        elif state is not None:
            first = _first_rounds(d, state, deliveries, pool)
            state, looks = first.state, looks | first.looks
        _settle_deliveries(deliveries)
        d.recorder.flush()
    if deps.dry_run and steps.drain:
        plan = notice_plan(d.recorder, d.notice, d.pods)
        record_would_drain(d.recorder, d.node, plan)
        return Ran(None, looks, plan)
    if state is None or state.done or handed_off or _hand_off(d, state):
        return Ran(state, looks)
    rest = drain_to_end(d.recorder, state, d.hooks, d.on_round)
    return Ran(rest.state, looks | rest.looks)


def _hand_off(d: Disruption, state: DrainState) -> bool:
    """Deployed: start the drain workflow with ``state`` (idempotent by execution name)."""
    if d.deps.start_drain is None or d.drain_locally:
        return False
    d.deps.start_drain(state.model_dump(mode="json"))
    return True


def _start(d: Disruption) -> DrainState:
    notice = d.notice
    return DrainState(
        node=d.node.name,
        event_id=notice.event_id,
        kind=notice.kind,
        deadline=notice.deadline,
        forced_at=forced_at_of(notice),
        notice_time=notice.event_time,
        started_at=d.deps.clock(),
    )


def _replace(d: Disruption, sent: threading.Event, peers: list[PodView] | None) -> None:
    # after this node's checkpoint requests (a Capacity Block's: every node's), one wait of at most 5 s
    until = time.monotonic() + d.deps.time_left(REQUESTS_FIRST_SECONDS)
    sent.wait(until - time.monotonic())
    if d.fan_out is not None:
        d.fan_out.sent(d.node.name)
        d.fan_out.wait_all_sent(max(0.0, until - time.monotonic()))
    refused = d.hooks.delivery.replacement_guard(d)
    if refused is not None:
        if d.claimed:
            drop_claim(d.deps.kube, d.node.name)
        d.recorder.add(ActionType.REPLACEMENT_SKIPPED, reason=refused, left_to=KARPENTER)
        return
    ensure_replacement(d.recorder, d.node, d.notice, d.pods, peers, claimed=d.claimed)


def _settle_deliveries(deliveries: list[Future[None]]) -> None:
    wait(deliveries)
    for future in deliveries:
        future.result()


def _first_rounds(d: Disruption, state: DrainState, deliveries: list[Future[None]], pool: ThreadPoolExecutor) -> Round:
    """Drain rounds while the checkpoint deliveries (exec, POST) are still under way, within the
    invocation's time budget."""
    rounds = _report(d, round_of(d.recorder, state, d.hooks, pool, follow=False))
    while not rounds.state.done and not d.deps.out_of_time:
        # only the deliveries still running: a finished one would end every wait at once (a hot loop)
        pending = [f for f in deliveries if not f.done()]
        if not pending:
            break
        wait(pending, timeout=d.deps.time_left(rounds.state.wait_seconds), return_when="FIRST_COMPLETED")
        later = _report(d, round_of(d.recorder, rounds.state, d.hooks, pool, follow=False))
        rounds = Round(later.state, rounds.looks | later.looks)
    return rounds


def _report(d: Disruption, rounds: Round) -> Round:
    if d.on_round is not None:
        d.on_round(rounds.state)
    return rounds


def hand_on(d: Disruption, steps: Steps, err: GpuwardenError) -> Ran | None:
    """After the mark, the drain workflow owns the drain: a failure of this run's own work that
    retrying may fix (`transient_kind`: the cluster unreachable, 5xx / 429 after the client's
    retries, write conflicts) hands what is left to it, recorded as `handed-on`; the workflow's
    rounds ask, evict and delete as they always do. None: not this run's to hand on (a failure
    retrying cannot fix, no drain planned, a dry run): the notice fails, keeping what was done
    (docs/reliability.md#after-the-mark)."""
    if transient_kind(err) is None or not steps.drain or d.deps.dry_run:
        return None
    reason = f"{type(err).__name__}: {err}"
    d.recorder.add(ActionType.HANDED_ON, d.node, reason=reason, error=type(err).__name__)
    state = _start(d)
    if _hand_off(d, state):
        return Ran(state)
    rest = drain_to_end(d.recorder, state, d.hooks, d.on_round)
    return Ran(rest.state, rest.looks)
