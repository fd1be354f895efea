"""The steps of the one disruption sequence every kind runs (docs/architecture.md, "The pipeline");
`engine.disrupt` runs them from a notice to its answer.

    resolve the node (`disrupt`) → guards → mark (cordon + taint + annotations): `guard_and_mark`
    → urgent deliveries (checkpoint requests) → replacement → first drain rounds → hand off to the
    drain workflow (deployed) or loop here (locally): `run_steps` → settle each round (retire /
    give back): `round_of`.

A kind changes the sequence only through its `KindHooks` and `Steps` (below); whether a PDB may be
overridden at the deadline is its own `voluntary` (`Deps.is_voluntary`). The kinds' specs
(gpuwarden/kinds/) hold every kind's hooks; the drain workflow's rounds read them there too.

Inside Lambda every wait here is cut to the invocation's time budget (`Deps.remaining`): what
does not fit is handed to the drain workflow, whose rounds are re-entrant.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.decide import Plan, nothing_to_do
from gpuwarden.domain.drain_faults import RETRY, drain_failure, transient_kind
from gpuwarden.domain.errors import DrainGaveUp, DrainInterrupted, GpuwardenError
from gpuwarden.domain.gang_progress import Looks
from gpuwarden.domain.gangs import Gang
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.protections import forced_at_of
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.checkpoint import Asking, PreparePod
from gpuwarden.services.engine.context import Deps, FanOut, Recorder, worker_pool
from gpuwarden.services.engine.drain import DrainState, Round, drain_node, round_facts
from gpuwarden.services.engine.gangs import ask_gangs, find_gangs
from gpuwarden.services.engine.holds import release_hold_of
from gpuwarden.services.engine.node_ops import give_back, mark_node, pods_on
from gpuwarden.services.engine.plan import Plan as DrainPlan
from gpuwarden.services.engine.plan import notice_plan, record_would_drain
from gpuwarden.services.engine.replace import (
    drop_claim,
    ensure_replacement,
    follow_replacement,
    gang_peers,
)
from gpuwarden.services.engine.result import KARPENTER, Result

#: How long the first drain round and the replacement wait for the checkpoint requests to be out.
REQUESTS_FIRST_SECONDS = 5.0

#: The plan of a kind that asks nothing of the node (the default).
NO_STEPS = nothing_to_do("this kind plans no step on the node")

Guard = Callable[["Disruption"], str | None]
Settle = Callable[[Recorder, DrainState], DrainState]
RoundReport = Callable[[DrainState], None]
#: The answer when the sequence stops before acting (not ours, refused, held by another notice).
Stopped = Callable[["Stop"], Result]
#: The answer once the sequence ran, with the reason it ran for.
Answer = Callable[["Disruption", "Marked", "Ran", str], Result]


def no_guard(_: Disruption) -> str | None:
    return None


def no_extra(_: Disruption) -> Mapping[str, str]:
    return {}


def as_is(_: Recorder, state: DrainState) -> DrainState:
    return state


@dataclass(frozen=True)
class KindHooks:
    """What one kind changes in the sequence (its spec's `hooks`: gpuwarden/kinds/). The defaults
    are an involuntary kind's, with no steps planned."""

    #: What a notice of the kind asks of the node (cordon, checkpoint, replace, drain) and why.
    plan: Plan = NO_STEPS
    #: Before the mark: a refusal (with its reason) leaves the node untouched.
    guard: Guard = no_guard
    #: Annotations the mark writes with gpuwarden's own (one write).
    mark_extra: Callable[[Disruption], Mapping[str, str]] = no_extra
    #: After the mark, before any pod is touched: a refusal gives the node back.
    after_mark: Guard = no_guard
    #: Done to each pod just before it is asked to checkpoint.
    prepare_pod: PreparePod | None = None
    #: Why this node's replacement is left to Karpenter (its NodeClaim is being deleted or carries
    #: `DisruptionReason`, or the node is `karpenter.sh/disrupted`): recorded as
    #: `replacement-skipped`, ``left_to: Karpenter``.
    replacement_guard: Guard = no_guard
    #: The mark also writes this event's replacement claim (`replace.mark_claim`): the launch then
    #: needs no write of its own. Only where `replacement_guard` reads the node's NodeClaim right
    #: before the launch, which is where Karpenter says it has begun to replace the node.
    claim_with_mark: bool = False
    #: After every drain round (here and in the drain workflow): retire, give back, or as is.
    settle: Settle = as_is
    #: Deployed: start the drain workflow before the first round, beside the deliveries
    #: (an involuntary notice's drain must not wait for this invocation).
    hand_off_at_once: bool = False
    #: The answer when the sequence stops before acting (None: `disrupt.ignored`, with the reason).
    stopped: Stopped | None = None
    #: The answer once it ran (None: `disrupt.result_of`: handled, duplicate or dry-run).
    answer: Answer | None = None


#: Spot interruptions and rebalance recommendations (and the capacity-reservation kinds): no
#: guard beyond the plan, no settling, the drain workflow started at once.
URGENT = KindHooks(hand_off_at_once=True)


@dataclass(frozen=True)
class Steps:
    """What this notice asks for once the node is marked."""

    checkpoint: bool = True
    replace: bool = True
    drain: bool = True


@dataclass
class Disruption:
    """One run of the sequence on one node."""

    notice: Notice
    deps: Deps
    node: NodeView
    hooks: KindHooks
    drain_locally: bool = True
    recorder: Recorder = field(init=False)
    #: Called with the state after every drain round this process runs (a terminal's progress).
    on_round: RoundReport | None = None
    #: This run's mark wrote the replacement's claim (`guard_and_mark`).
    claimed: bool = False
    #: The runs of one Capacity Block side by side in this process (each asks its own node's pods).
    fan_out: FanOut | None = None
    _pods: list[PodView] | None = None
    _gangs: list[Gang] | None = None

    def __post_init__(self) -> None:
        self.recorder = Recorder(self.deps, self.notice.event_id)

    @property
    def pods(self) -> list[PodView]:
        """The pods on the node, listed once when first needed (an involuntary kind cordons first)."""
        if self._pods is None:
            self._pods = pods_on(self.deps.kube, self.node.name)
        return self._pods

    @property
    def gangs(self) -> list[Gang]:
        """The gangs of the node's pods (docs/training-jobs.md), listed once (one LIST per gang) when
        first needed; bad gang input is reported then."""
        if self._gangs is None:
            self._gangs = find_gangs(self.recorder, self.pods, report=True, fan_out=self.fan_out)
        return self._gangs


@dataclass(frozen=True)
class Stop:
    """Why the sequence stops before acting on the node, for the kind's `KindHooks.stopped`."""

    notice: Notice
    recorder: Recorder
    #: None: the notice names no node of the cluster.
    node: NodeView | None
    reason: str
    #: What the sequence was for (the plan's reason, or the use case's).
    why: str
    #: A guard refused (else: not ours, or another notice holds the node).
    refused: bool = False


@dataclass(frozen=True)
class Marked:
    """What the guards and the mark decided. ``refused``/``held_by`` set: nothing more happens."""

    node: NodeView
    changed: bool = False
    refused: str | None = None
    held_by: str | None = None
    #: The node carried this notice's mark before (a redelivery, or a run the drain workflow resumed).
    resumed: bool = False

    @property
    def stopped(self) -> bool:
        return self.refused is not None or self.held_by is not None

    def held_reason(self) -> str:
        return f"node {self.node.name} is already being handled for {self.held_by}"


def guard_and_mark(d: Disruption, why: str, claim: str | None = None) -> Marked:
    """Guards, then the mark (recorded as `cordon` when this run wrote it; with ``claim``, the
    replacement's claim in the same write), then `after_mark`."""
    resumed = d.node.annotations.get(ann.EVENT_ID) == d.notice.event_id
    refused = d.hooks.guard(d)
    if refused is not None:
        return Marked(d.node, refused=refused, resumed=resumed)
    voluntary = d.deps.voluntary_kinds
    mark = mark_node(d.deps.kube, d.node, d.notice, voluntary=voluntary, extra=d.hooks.mark_extra(d), claim=claim)
    if mark.held_by is not None:
        return Marked(mark.node, held_by=mark.held_by, resumed=resumed)
    d.node = mark.node
    d.claimed = mark.changed and claim is not None and d.node.annotations.get(ann.REPLACEMENT) == claim
    if mark.changed:
        taint = f"{ann.TAINT_KEY}={d.notice.kind.value}:NoSchedule"
        d.recorder.add(ActionType.CORDON, d.node, taint=taint, reason=why)
    refused = d.hooks.after_mark(d)
    if refused is not None:
        give_back(d.recorder, d.node.name, d.notice.event_id, refused)
        return Marked(d.node, changed=mark.changed, refused=refused, resumed=resumed)
    return Marked(d.node, changed=mark.changed, resumed=resumed)


@dataclass(frozen=True)
class Ran:
    """What `run_steps` answers: the drain's state (None: no drain ran here, a dry run or a notice
    that only prepares the node), and where the gangs it asked stand."""

    state: DrainState | None
    looks: Looks = field(default_factory=Looks)
    #: A dry run's drain: what it would do, as its actions recorded it (docs/cli.md#plans).
    plan: DrainPlan | None = None


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
                d.recorder, d.node, d.notice.deadline, pool, d.hooks.prepare_pod, d.fan_out, d.notice.event_time
            )
            asked = ask_gangs(asking, d.pods, sent, d.gangs)
            deliveries, looks, peers = asked.deliveries, asked.looks, gang_peers(d.gangs, d.pods)
        else:
            sent.set()
        if steps.replace:
            deliveries.append(pool.submit(_replace, d, sent, peers))
        if state is not None:  # no pod is asked to leave before every checkpoint request is out
            sent.wait(deps.time_left(REQUESTS_FIRST_SECONDS))
        if state is not None and d.hooks.hand_off_at_once and _hand_off(d, state):
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
    refused = d.hooks.replacement_guard(d)
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


def round_of(
    recorder: Recorder, state: DrainState, hooks: KindHooks, pool: ThreadPoolExecutor | None = None, follow: bool = True
) -> Round:
    """One drain round and the kind's `settle` after it (here, and in the drain workflow). Not
    ``follow``: the first invocation's rounds, beside its own launch, do not read the replacement."""
    node = recorder.deps.kube.get_node(state.node)  # the round's one read of the node
    if follow and not state.done and node is not None:  # a replacement that failed to launch: the next option
        node = follow_replacement(recorder, node, state.event_id, lost=not recorder.deps.is_voluntary(state.kind))
    drained = drain_node(recorder, state, node, pool, hooks.prepare_pod)
    settled = hooks.settle(recorder, drained.state)
    if settled.done and node is not None:  # the last round: the replacement's hold goes once its pods run there
        release_hold_of(recorder, node)
    return Round(settled, drained.looks)


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


def drain_to_end(
    recorder: Recorder, state: DrainState, hooks: KindHooks = URGENT, on_round: RoundReport | None = None
) -> Round:
    """The local driver of the rounds (deployed, the Step Functions loop does this, with the same
    retry: a round that fails for a reason retrying may fix is tried again after `RETRY`'s delay
    while `drain_failure` leaves room; when it does not, `DrainGaveUp` fails the run as the
    workflow's `NotDrained` fails the execution, recorded as `drain-blocked` first:
    docs/architecture.md, "The pipeline"). Inside a Lambda with no drain workflow it stops at
    the time budget, the drain not done. Answers the last state and where the gangs stood over
    every round."""
    rounds, retries = Round(state), 0
    while not rounds.state.done and not recorder.deps.out_of_time:
        recorder.deps.sleep(RETRY.delay(retries - 1) if retries else rounds.state.wait_seconds)
        try:
            later = round_of(recorder, rounds.state, hooks)
        except GpuwardenError as err:
            mapped = drain_failure(err, round_facts(recorder, rounds.state), retries=retries, now=recorder.deps.clock())
            if isinstance(mapped, DrainInterrupted):
                retries += 1
                continue
            if isinstance(mapped, DrainGaveUp):  # the workflow's `NotDrained`: the run fails, saying what is left
                recorder.add(ActionType.DRAIN_BLOCKED, reason=str(mapped), error=type(err).__name__)
                raise (mapped.after_retries() if retries else mapped) from err
            raise  # retrying cannot fix it (a 403, a setting): the run fails
        retries = 0
        rounds = Round(later.state, rounds.looks | later.looks)
        if on_round is not None:
            on_round(rounds.state)
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
