"""Which pod gets what in one drain round, and why (pure; docs/cluster.md drain semantics).

One round looks at every pod on the node and decides a `PodStep`:

* ``skip``        DaemonSet, mirror and finished pods are left alone (as `kubectl drain
                  --ignore-daemonsets`), and so are pods that belong to no node any more.
* ``signal``      an opted-in pod that has not been asked yet: ask it to checkpoint.
* ``wait``        an opted-in pod that was asked and has neither acknowledged nor run out
                  of time, or a pod that is already terminating.
* ``evict``       everything else: the Eviction API, which a PodDisruptionBudget may refuse.
* ``delete``      involuntary kinds only: a pod whose eviction is still refused at
                  ``deadline - terminationGracePeriodSeconds`` is deleted with the grace
                  period that is left, so it stops before the instance does.

What protects a pod on the kind's drain is the kind's row of `domain.protections` (its ``kind``
in the context): on an expiry an owner's ``karpenter.sh/do-not-disrupt`` pod is left to Karpenter
(``skip``), and the "deadline" a PDB yields to is Karpenter's forced moment (expiry + the
NodeClaim's terminationGracePeriod; none: never), not the expiry.

Pods leave in priority order, as the kubelet's graceful node shutdown takes them: a pod is
not asked to leave while a pod of lower ``spec.priority`` on the node has not been asked yet
(it waits, ``held_for`` says behind which priority), and within a round the requests go out
lowest priority first (`leave_order`). An involuntary deadline bounds the hold: from
``deadline - grace - STOP_MARGIN_SECONDS`` on the pod goes regardless, with its full grace.
Every grace gpuwarden asks for is at least ``MIN_GRACE_SECONDS``: 0 removes the pod from the
API at once, before its containers have stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from gpuwarden.domain.checkpoint import BadCheckpoint, checkpoint_spec, current_request
from gpuwarden.domain.gang_progress import GangHold
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.protections import do_not_disrupt_left, force_deadline
from gpuwarden.domain.views import PodView

CHECKPOINT_TIMED_OUT = "checkpoint timed out"

Step = Literal["signal", "wait", "evict", "delete", "skip"]
#: What a ``wait`` waits on: the pod's own checkpoint acknowledgement, the rest of its gang's
#: checkpoint, the end of a grace period already given (a terminating pod), or its turn behind pods
#: of lower priority. (A PDB's refusal is ``blocked``.)
WaitsOn = Literal["checkpoint", "gang", "grace", "turn"]


@dataclass(frozen=True)
class PodStep:
    pod: str
    step: Step
    reason: str
    #: For evict/delete: the grace period to ask for (None: the pod's own).
    grace_seconds: int | None = None
    #: A ``wait`` only because pods of this lower priority have not been asked to leave yet.
    held_for: int | None = None
    #: A ``wait`` because a PodDisruptionBudget refused the eviction (HTTP 429): the drain backs off.
    blocked: bool = False
    #: Any other ``wait``: what it waits on.
    waits_on: WaitsOn | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"pod": self.pod, "step": self.step, "reason": self.reason}
        if self.grace_seconds is not None:
            out["grace_seconds"] = self.grace_seconds
        return out


@dataclass(frozen=True)
class DrainContext:
    event_id: str
    involuntary: bool
    deadline: datetime | None
    now: datetime
    default_checkpoint_timeout: int = 60
    allow_exec: bool = True
    #: The notice's own time: another notice's request acknowledged before it is no checkpoint
    #: for this one (`checkpoint.current_request`).
    notice_time: datetime | None = None
    #: The doomed node's pods that belong to a gang (pod key → what the gang means for it):
    #: such a pod leaves only once its gang has checkpointed (docs/training-jobs.md).
    gangs: Mapping[str, GangHold] = field(default_factory=dict)
    #: The notice's kind: its row of `domain.protections` says what holds on this drain (None:
    #: as a loss warning's, the deadline is the instance's end).
    kind: Kind | None = None
    #: Karpenter's own forced moment for the node (`protections.karpenter_forces_at`), for a kind
    #: whose PDBs and do-not-disrupt hold until Karpenter forces them; None there: never.
    forced_at: datetime | None = None

    @property
    def hard_deadline(self) -> datetime | None:
        """When pods are forced off the node whatever protects them: the deadline of a loss
        warning, Karpenter's forced moment on an expiry (None: never)."""
        return force_deadline(self.kind, self.deadline, self.forced_at)


def skip_reason(pod: PodView) -> str | None:
    if pod.is_mirror:
        return "mirror (static) pod"
    if pod.is_daemonset:
        return f"DaemonSet pod ({pod.owner_name})"
    if pod.finished:
        return f"finished pod ({pod.phase})"
    return None


def seconds_left(ctx: DrainContext) -> float | None:
    return None if ctx.deadline is None else (ctx.deadline - ctx.now).total_seconds()


#: Involuntary kinds: a pod's grace ends this long before the deadline, so the pod has stopped
#: (and the API has seen it go) before the instance does, not at the same instant.
STOP_MARGIN_SECONDS = 2


#: The shortest grace gpuwarden ever asks for (eviction or delete): a grace of 0 removes the pod
#: from the API before its containers stop (a "force delete"); kubectl turns 0 into 1 without --force.
MIN_GRACE_SECONDS = 1


def grace_left(ctx: DrainContext) -> int | None:
    """The longest grace a pod may still get: what is left before ``deadline - STOP_MARGIN_SECONDS``
    (never below ``MIN_GRACE_SECONDS``)."""
    hard = ctx.hard_deadline
    left = None if hard is None else (hard - ctx.now).total_seconds()
    return None if left is None else max(MIN_GRACE_SECONDS, int(left) - STOP_MARGIN_SECONDS)


def grace_for(pod: PodView, ctx: DrainContext) -> int | None:
    """Involuntary: never ask for more grace than the instance has left."""
    remaining = grace_left(ctx)
    if not ctx.involuntary or remaining is None:
        return None
    return remaining if remaining < pod.grace_seconds else None


def must_delete(pod: PodView, ctx: DrainContext) -> bool:
    """Involuntary and past `deadline - grace`: a refused eviction becomes a delete (on an expiry,
    past Karpenter's forced moment - grace: `ctx.hard_deadline`)."""
    hard = ctx.hard_deadline
    if not ctx.involuntary or hard is None:
        return False
    return ctx.now >= hard - timedelta(seconds=pod.grace_seconds)


def _terminating_step(pod: PodView, ctx: DrainContext) -> PodStep:
    assert pod.deletion_timestamp is not None
    hard = ctx.hard_deadline
    stop_by = None if hard is None else hard - timedelta(seconds=STOP_MARGIN_SECONDS)
    grace = grace_left(ctx) or MIN_GRACE_SECONDS
    shorter = pod.deletion_timestamp > ctx.now + timedelta(seconds=grace)  # a delete can only shorten it
    if ctx.involuntary and stop_by is not None and pod.deletion_timestamp > stop_by and shorter:
        return PodStep(pod.key, "delete", "terminating past the deadline: shortening its grace", grace)
    return PodStep(pod.key, "wait", "terminating", waits_on="grace")


def _checkpoint_step(pod: PodView, ctx: DrainContext) -> PodStep | None:
    spec = checkpoint_spec(pod, ctx.default_checkpoint_timeout, ctx.allow_exec)
    if spec is None:
        return None
    if isinstance(spec, BadCheckpoint):
        return PodStep(pod.key, "evict", f"no checkpoint: {spec.reason}", grace_for(pod, ctx))
    hold = ctx.gangs.get(pod.key)
    if hold is not None and not hold.asked:
        # `Gang.to_ask`: a rank not Running yet has nothing to save; otherwise the gang asks its leader
        why = f"{pod.phase}, nothing to save yet" if not pod.started else "gang asks only its leader"
        return PodStep(pod.key, "evict", f"not asked ({why}): gang {hold.gang}", grace_for(pod, ctx))
    request = current_request(pod, ctx.event_id, ctx.now, ctx.notice_time)
    if request is None:
        left = seconds_left(ctx)
        if left is not None and left <= 0:
            return PodStep(pod.key, "evict", "deadline passed before a checkpoint could be asked")
        return PodStep(pod.key, "signal", f"checkpoint ({spec.mode}) requested")
    if request.done:
        return PodStep(pod.key, "evict", "checkpoint acknowledged", grace_for(pod, ctx))
    if request.failed:
        return PodStep(pod.key, "evict", f"checkpoint failed: {request.failed}", grace_for(pod, ctx))
    # a request another notice made (for the gang) may ask for a later time than this deadline.
    # The pod's own open request is waited for up to that time, never cut at deadline - grace: a
    # sharded checkpoint's rank is writing its part, and SIGTERM then loses the whole write
    # (docs/training-jobs.md). Only waiting for the *rest* of the gang is bounded by deadline -
    # grace (`_after_gang`). Involuntary, the wait ends early enough for the eviction to land (with
    # the shortest grace) before the instance goes.
    by = request.by
    if ctx.deadline is not None:
        last = (
            ctx.deadline - timedelta(seconds=STOP_MARGIN_SECONDS + MIN_GRACE_SECONDS)
            if ctx.involuntary
            else ctx.deadline
        )
        by = min(by, last)
    if ctx.now < by:
        return PodStep(pod.key, "wait", f"waiting for checkpoint ack until {by.isoformat()}", waits_on="checkpoint")
    return PodStep(pod.key, "evict", CHECKPOINT_TIMED_OUT, grace_for(pod, ctx))


def _after_gang(step: PodStep, pod: PodView, ctx: DrainContext) -> PodStep:
    """A gang's pod on the doomed node leaves only once the gang has checkpointed (every asked pod
    acknowledged, failed or timed out), and still by its own ``deadline - grace`` (involuntary)."""
    hold = ctx.gangs.get(pod.key)
    if hold is None or hold.checkpointed or step.step not in ("evict", "delete"):
        return step
    latest = hold_until(pod, ctx)
    if latest is not None and ctx.now >= latest:
        why = f"{step.reason}; gang {hold.gang} not checkpointed by deadline - grace"
        return PodStep(pod.key, step.step, why, step.grace_seconds)
    if hold.until is not None and ctx.now >= hold.until:
        return step
    return PodStep(pod.key, "wait", hold.reason, waits_on="gang")


def decide_pod(pod: PodView, ctx: DrainContext) -> PodStep:
    reason = skip_reason(pod)
    if reason is not None:
        return PodStep(pod.key, "skip", reason)
    if pod.terminating:
        return _terminating_step(pod, ctx)
    step = _checkpoint_step(pod, ctx)
    if step is None:
        step = PodStep(pod.key, "evict", "no checkpoint handshake", grace_for(pod, ctx))
    left = do_not_disrupt_left(ctx.kind, pod, ctx.forced_at) if step.step in ("evict", "delete") else None
    if left is not None:
        return PodStep(pod.key, "skip", left)
    return _after_gang(step, pod, ctx)


def _asked_to_leave_or_staying(step: PodStep, pod: PodView) -> bool:
    """Whether a pod no longer holds back higher-priority pods: it is being (or has been) asked to
    leave, it is terminating, or it never leaves (skipped)."""
    return step.step != "signal" and not (step.step == "wait" and not pod.terminating)


def hold_until(pod: PodView, ctx: DrainContext) -> datetime | None:
    """The latest a pod may be held behind lower-priority pods (involuntary, with a deadline): it
    must start leaving then to keep its whole grace before the instance stops. None: no bound
    other than the lower-priority pods' own checkpoint timeouts."""
    hard = ctx.hard_deadline
    if not ctx.involuntary or hard is None:
        return None
    return hard - timedelta(seconds=pod.grace_seconds + STOP_MARGIN_SECONDS)


def _hold(step: PodStep, pod: PodView, lowest_waiting: int | None, ctx: DrainContext) -> PodStep:
    if step.step not in ("evict", "delete") or pod.terminating:
        return step
    if lowest_waiting is None or pod.priority <= lowest_waiting:
        return step
    until = hold_until(pod, ctx)
    if until is not None and ctx.now >= until:
        return step
    reason = f"after the pods of lower priority ({lowest_waiting}) are asked to leave"
    return PodStep(pod.key, "wait", reason, held_for=lowest_waiting, waits_on="turn")


def decide_round(pods: Iterable[PodView], ctx: DrainContext) -> list[PodStep]:
    pods = list(pods)
    steps = [decide_pod(pod, ctx) for pod in pods]
    waiting = [p.priority for p, s in zip(pods, steps, strict=True) if not _asked_to_leave_or_staying(s, p)]
    lowest = min(waiting, default=None)
    return [_hold(s, p, lowest, ctx) for p, s in zip(pods, steps, strict=True)]


def leave_order(steps: Iterable[PodStep], pods: Mapping[str, PodView]) -> list[list[PodStep]]:
    """The round's evictions and deletes in waves of one priority, lowest first: a wave is sent
    (in parallel) only once the wave before it has been answered."""
    acting = [s for s in steps if s.step in ("evict", "delete")]
    levels = sorted({pods[s.pod].priority for s in acting})
    return [[s for s in acting if pods[s.pod].priority == level] for level in levels]


def on_eviction_blocked(pod: PodView, ctx: DrainContext, why: str, *, because: str = "") -> PodStep:
    """A PDB refused the eviction (HTTP 429): retry later, or delete when the deadline says so.

    ``because``: why the pod was being evicted (e.g. the deadline passed before it could be asked
    to checkpoint). The delete keeps it, so the run still says why the pod left unasked.
    """
    if must_delete(pod, ctx):
        grace = max(MIN_GRACE_SECONDS, min(pod.grace_seconds, grace_left(ctx) or MIN_GRACE_SECONDS))
        blocked = f"still blocked at deadline - grace ({why})"
        return PodStep(pod.key, "delete", f"{because}; {blocked}" if because else blocked, grace)
    return PodStep(pod.key, "wait", f"eviction blocked: {why}", blocked=True)
