"""The drain's rounds after the mark (docs/architecture.md, "The pipeline", step 7): `round_of`,
one round and the kind's `Settlement.settle` after it, which the drain workflow runs once per
execution step (deployed) and `drain_to_end` loops here (the command line, a Lambda with no
drain workflow), with the workflow's retry.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.drain_faults import RETRY, drain_failure
from gpuwarden.domain.errors import DrainGaveUp, DrainInterrupted, GpuwardenError
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.drain import DrainState, Round, drain_node, round_facts
from gpuwarden.services.engine.holds import release_hold_of
from gpuwarden.services.engine.hooks import URGENT, KindHooks, RoundReport
from gpuwarden.services.engine.replace import follow_replacement


def round_of(
    recorder: Recorder, state: DrainState, hooks: KindHooks, pool: ThreadPoolExecutor | None = None, follow: bool = True
) -> Round:
    """One drain round and the kind's `settle` after it (here, and in the drain workflow). Not
    ``follow``: the first invocation's rounds, beside its own launch, do not read the replacement."""
    node = recorder.deps.kube.get_node(state.node)  # the round's one read of the node
    if follow and not state.done and node is not None:  # a replacement that failed to launch: the next option
        node = follow_replacement(recorder, node, state.event_id, lost=not recorder.deps.is_voluntary(state.kind))
    drained = drain_node(recorder, state, node, pool, hooks.delivery.prepare_pod)
    settled = hooks.settlement.settle(recorder, drained.state)
    if settled.done and node is not None:  # the last round: the replacement's hold goes once its pods run there
        release_hold_of(recorder, node)
    return Round(settled, drained.looks)


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
