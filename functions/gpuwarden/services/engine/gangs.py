"""The gang step: a notice for one node of a distributed job checkpoints the whole job, once
(docs/training-jobs.md). Every kind reaches it the same way: the pipeline's urgent step
(`ask_gangs`), each drain round (`gang_round`), and the runbook's `checkpoint`.

- Discovery: each opted-in pod on the doomed node names its gang (`domain.gangs.gang_of`); each
  gang is listed once, with a label-selector LIST in its namespace (an explicit group: its
  namespace's pods). Never a LIST of every pod in the cluster.
- Asking: every pod the gang asks (all its opted-in pods, on every node, or only its leader) is
  claimed through the one write primitive (`checkpoint.ask_pods` → `writes.update_pod`); a pod
  that already carries a current request (this notice's, or another notice's for the same gang)
  is not asked again, so concurrent notices for several nodes of one job ask each pod once.
- Holding: a gang's pods on the doomed node leave only once the gang has checkpointed
  (`domain.gang_progress.holds` → `domain.drain`); its pods on healthy nodes are asked, nothing more.
- Progress is a value: each step answers where the gangs it looked at stand (`Looks`), for the
  run to add up into the result's ``checkpoints``.
- Bad input is reported on the pod (a Kubernetes Event and the result) on the urgent step, and
  that pod is a gang of one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import KubeError
from gpuwarden.domain.gang_progress import GangHold, GangProgress, Looks, holds, progress
from gpuwarden.domain.gangs import BadGangInput, Gang, form_gang, gang_refs, is_gang
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.observability import logger
from gpuwarden.services.engine.checkpoint import Ask, Asking, ask_pods, asks_for
from gpuwarden.services.engine.context import FanOut, Recorder, worker_pool

#: The Kubernetes Event reason on a pod whose gang annotations cannot be read.
BAD_INPUT_REASON = "CheckpointGangInvalid"


def find_gangs(
    recorder: Recorder, pods: Sequence[PodView], *, report: bool = False, fan_out: FanOut | None = None
) -> list[Gang]:
    """The gangs of ``pods`` (one LIST each, in its namespace). A gang of one is not returned: a Job
    that runs one pod, a pod that opted into nothing, a pod with bad gang input (``report``: the
    urgent step's look, which reports it as an Event on the pod and a `checkpoint-gang-invalid`
    action in the result). ``fan_out``: the runs of one Capacity Block share it, one LIST per gang
    for the whole block."""
    refs, bad = gang_refs(pods)
    by_key = {p.key: p for p in pods}
    gangs: list[Gang] = []
    kube = recorder.deps.kube
    for ref in refs:
        try:
            read = partial(kube.list_pods, ref.namespace, ref.labels or None)
            listed = read() if fan_out is None else fan_out.once(ref.key, read)
        except KubeError as err:  # the node's own pods are still asked, each as a gang of one
            why = f"gang {ref.key} could not be listed ({err}): its pods here are handled as gangs of one"
            if report:  # once per run, not every drain round
                recorder.add(ActionType.GANG_INVALID, gang=ref.key, reason=why)
            logger.warning(why)
            continue
        gang = form_gang(ref, listed)
        bad += [b for b in gang.excluded if b not in bad]
        if is_gang(gang):
            gangs.append(gang)
        known = {p.key: p for p in listed}
        by_key |= {b.pod: known[b.pod] for b in gang.excluded if b.pod in known}
    if report:
        for item in bad:
            _report(recorder, by_key.get(item.pod), item)
    return gangs


def _report(recorder: Recorder, pod: PodView | None, bad: BadGangInput) -> None:
    recorder.add(ActionType.GANG_INVALID, pod=bad.pod, reason=f"{bad.reason}: handled as a gang of one")
    if pod is None or recorder.deps.dry_run:
        return
    try:
        recorder.deps.kube.create_pod_event(pod, BAD_INPUT_REASON, f"{bad.reason}: handled as a gang of one", True)
    except KubeError as err:  # an Event is a courtesy: the step itself is done
        logger.warning("event not posted", extra={"reason": BAD_INPUT_REASON, "error": str(err)})


def _gang_asks(recorder: Recorder, node: NodeView, gang: Gang, only: set[str] | None = None) -> list[Ask]:
    """Who of ``gang`` is asked (``only``: just these pods), and its doomed-node pods that are only
    marked (a leader-mode gang's other pods wait for their leader, kept from Karpenter's drain)."""
    policy = recorder.deps.policy.checkpoint
    asked = gang.to_ask(policy.default_timeout_seconds, policy.allow_exec)
    out = [
        Ask(pod, spec, gang.key, pod.node_name == node.name) for pod, spec in asked if only is None or pod.key in only
    ]
    if only is None:
        keys = {p.key for p, _ in asked}
        out += [Ask(p, None, gang.key) for p in gang.members if p.node_name == node.name and p.key not in keys]
    return out


@dataclass(frozen=True)
class Asked:
    """What the urgent step did: the deliveries still running, and where the gangs stand."""

    deliveries: list[Future[None]]
    looks: Looks = field(default_factory=Looks)


def ask_gangs(
    asking: Asking, pods: list[PodView], sent: threading.Event | None = None, gangs: list[Gang] | None = None
) -> Asked:
    """The urgent step: ask the node's pods and every gang they belong to (each pod once, however
    many notices touch the gang). ``sent`` as `ask_pods`. ``gangs``: as `find_gangs` found them
    already (with ``report=True``), not listed again."""
    recorder, fan_out = asking.recorder, asking.fan_out
    gangs = find_gangs(recorder, pods, report=True, fan_out=fan_out) if gangs is None else gangs
    in_gang = {p.key for g in gangs for p in g.members}
    asks = asks_for([p for p in pods if p.key not in in_gang], recorder)
    looks = Looks()
    for gang in gangs:
        mine = _gang_asks(recorder, asking.node, gang)
        if fan_out is not None:
            mine = [a for a in mine if a.doomed or fan_out.asks_elsewhere(a.pod)]
        asks += mine
        _, look = _look(recorder, gang, asking, {a.pod.key for a in mine if a.spec is not None})
        looks = looks.with_look(look)
    return Asked(ask_pods(asking, asks, sent), looks)


def ask_only(recorder: Recorder, node: NodeView, pods: list[PodView], deadline: datetime | None) -> Asked:
    """Ask the node's opted-in pods and their gangs to checkpoint, evicting nothing, and wait for
    the deliveries (exec, http) to answer: the runbook's `checkpoint`, and a scheduled maintenance
    that do-not-disrupt refuses when its instance is about to go."""
    with worker_pool() as pool:
        asked = ask_gangs(Asking(recorder, node, deadline, pool), pods)
        for delivery in asked.deliveries:
            delivery.result()
    recorder.flush()
    return asked


def _look(recorder: Recorder, gang: Gang, asker: Asking, asking: set[str]) -> tuple[GangProgress, dict[str, object]]:
    """Where the gang's checkpoint stands now, and its entry in the result's ``checkpoints``
    (``asking``: the pods this step is asking, counted as asked)."""
    policy = recorder.deps.policy.checkpoint
    now = recorder.deps.clock()
    state = progress(
        gang,
        recorder.event_id,
        now,
        asker.deadline,
        policy.default_timeout_seconds,
        policy.allow_exec,
        asker.since,
        asker.joined_since,
    )
    look = state.as_result()
    look["asked"] = sorted(set(state.asked) | asking)
    return state, look


@dataclass(frozen=True)
class GangRound:
    """One drain round's look at the node's gangs."""

    #: What holds each gang pod on the node.
    holds: dict[str, GangHold] = field(default_factory=dict)
    #: The pods this look asked (the round does not ask them again).
    asked: set[str] = field(default_factory=set)
    #: Where the gangs stand.
    looks: Looks = field(default_factory=Looks)


def gang_round(asking: Asking, pods: list[PodView]) -> GangRound:
    """One drain round's look at the node's gangs (one LIST per gang), after asking any gang pod
    still without a request."""
    recorder = asking.recorder
    gangs = find_gangs(recorder, pods)
    if not gangs:
        return GangRound()
    out: dict[str, GangHold] = {}
    asked: set[str] = set()
    asks: list[Ask] = []
    looks = Looks()
    for gang in gangs:
        state, look = _look(recorder, gang, asking, set())
        looks = looks.with_look(look)
        if state.unasked:
            asks += _gang_asks(recorder, asking.node, gang, set(state.unasked))
            asked |= set(state.unasked)
        out |= holds(gang, state, pods)
    if asks:
        for future in ask_pods(asking, asks):
            future.add_done_callback(lambda f: f.exception())
    return GangRound(out, asked, looks)
