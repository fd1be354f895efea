"""Where every lost GPU-minute of a run went (docs/simulate.md#where-the-lost-gpu-minutes-go).

Each loss (a pod, or a rank of a job that restarted, losing the work since its last completed
checkpoint) gets exactly one cause, read from what the world recorded when the work stopped: which
pod's stop stopped it (the pod itself, or the rank whose stop restarted its job), who sent that pod
SIGTERM and why (gpuwarden's action and its reason, Karpenter's eviction) or whether its instance
was simply gone, whether a checkpoint was being written then (and when it would have been written),
and when one was last asked for and last completed. The causes of one arm add up to its
`training_gpu_minutes_lost`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sim.outcome.accounting import Loss
from sim.outcome.karpenter_arm import EXPIRED

# An ArmResult of sim.outcome.runner (which imports this module): typed loosely here.
ArmResult = Any

#: gpuwarden's drain reasons this reads (functions/gpuwarden/domain/drain.py)
_TIMED_OUT = "checkpoint timed out"
_ACKNOWLEDGED = "checkpoint acknowledged"
#: gpuwarden's kind for a drain planned before Karpenter's expiry
_EXPIRY_KIND = "karpenter-expiry"
#: a gang's pod leaves by its own deadline - grace, asked checkpoint or not (docs/training-jobs.md)
_DEADLINE_LESS_GRACE = "deadline - grace"


class Cause(StrEnum):
    UNHANDLED = "instance-gone-unhandled"
    SIGTERM_BEFORE_ASKED = "sigterm-before-checkpoint"
    STOPPED_WITHOUT_NOTICE = "stopped-without-notice"
    WRITE_LONGER_THAN_NOTICE = "checkpoint-longer-than-notice"
    CUT_BY_GPUWARDEN = "checkpoint-cut-by-gpuwarden"
    TIMED_OUT = "checkpoint-timed-out"
    CUT_BY_KARPENTER = "checkpoint-cut-by-karpenter"
    STALE_ACKNOWLEDGEMENT = "evicted-on-an-earlier-checkpoint"
    EXPIRED_BY_KARPENTER = "karpenter-expiry"


#: What each cause means, and whether gpuwarden could have saved what it lost (docs/simulate.md).
MEANING: dict[Cause, tuple[str, bool]] = {
    Cause.UNHANDLED: ("the instance was gone before anyone asked for a checkpoint or sent SIGTERM", False),
    Cause.SIGTERM_BEFORE_ASKED: (
        "SIGTERM (an eviction) came before a checkpoint was asked for, and the job does not save on SIGTERM",
        False,
    ),
    Cause.STOPPED_WITHOUT_NOTICE: ("stopped on a node no notice named (consolidation, a rank elsewhere)", False),
    Cause.WRITE_LONGER_THAN_NOTICE: (
        "a checkpoint was being written when the pod or its instance had to stop: the write takes longer "
        "than the notice left",
        False,
    ),
    Cause.CUT_BY_GPUWARDEN: (
        "gpuwarden stopped the pod while the checkpoint it asked for was being written, though the write "
        "would have ended before the instance was gone",
        True,
    ),
    Cause.TIMED_OUT: (
        "the checkpoint took longer than the pod's checkpoint-timeout-seconds: evicted before it was written",
        False,
    ),
    Cause.CUT_BY_KARPENTER: (
        "Karpenter evicted the pod while a checkpoint was being written (no karpenter.sh/do-not-disrupt)",
        False,
    ),
    Cause.EXPIRED_BY_KARPENTER: (
        "Karpenter expired the node (creationTimestamp + expireAfter) and drained it: forceful, no checkpoint "
        "asked, though the time was known from the node's first day",
        True,
    ),
    Cause.STALE_ACKNOWLEDGEMENT: (
        "evicted on the acknowledgement of a checkpoint asked for by an earlier notice: the work since it was lost",
        True,
    ),
}


@dataclass(frozen=True)
class Attributed:
    loss: Loss
    cause: Cause
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.loss.pod,
            "node": self.loss.node,
            "at_seconds": round(self.loss.at, 1),
            "gpus": self.loss.gpus,
            "gpu_minutes": round(self.loss.gpu_minutes, 1),
            "cause": self.cause.value,
            "detail": self.detail,
        }


@dataclass
class _Record:
    """What the run's ledger and gpuwarden's answers say about pods and nodes."""

    stopped_by: dict[str, tuple[str, str]]  # pod -> (who, why): the first SIGTERM it got
    notices: dict[str, list[float]]  # node -> times a notice named it
    gone: dict[str, float]  # node -> when EC2 takes its instance
    expired: dict[str, float]  # nodes whose NodeClaim Karpenter expired -> when
    expiry_drained: set[str]  # nodes gpuwarden drained for their expiry (kind karpenter-expiry)

    @classmethod
    def of(cls, result: ArmResult) -> _Record:
        stopped_by: dict[str, tuple[str, str]] = {}
        for action in _actions(result.gpuwarden_results):
            if action.get("type") in ("evict", "delete") and action.get("pod"):
                stopped_by.setdefault(
                    str(action["pod"]), ("gpuwarden", f"{action['type']}: {action.get('reason', '')}")
                )
        notices: dict[str, list[float]] = {}
        expired: dict[str, float] = {}
        for t, node, what in result.ledger.trace:
            if what.startswith("Karpenter deletes NodeClaim (") and EXPIRED in what:
                expired.setdefault(node, t)
            if what.startswith("Karpenter evicted ") or what.startswith("Karpenter force-deleted "):
                verb, pod = what.split(" ", 2)[1:]
                stopped_by.setdefault(pod, ("Karpenter", verb))
            elif what.endswith(" notice"):
                notices.setdefault(node, []).append(t)
        drained = {str(r.get("node")) for r in result.gpuwarden_results if r.get("kind") == _EXPIRY_KIND}
        return cls(stopped_by, notices, dict(result.ledger.instance_ends), expired, drained)

    def notice_before(self, node: str, t: float) -> float | None:
        return max((n for n in self.notices.get(node, []) if n <= t + 0.5), default=None)


def _actions(results: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for result in results:
        yield from result.get("actions") or []
        yield from _actions(result.get("results") or [])


def attribute(result: ArmResult) -> list[Attributed]:
    """One cause for every loss of the arm that lost work."""
    record = _Record.of(result)
    return [_attribute(loss, record) for loss in result.ledger.losses if loss.seconds > 0]


def _attribute(loss: Loss, record: _Record) -> Attributed:
    trigger = loss.trigger or loss.pod
    stop = loss.ended_at if loss.ended_at is not None else loss.at
    node = loss.trigger_node or loss.node
    notice = record.notice_before(node, stop)
    at = _clock(notice)
    who, why = record.stopped_by.get(trigger, ("", ""))
    by = f"{who} ({why})" if who else "its instance's end"
    whose = "" if trigger == loss.pod else f", when {trigger} stopped and its job restarted"
    if loss.writing is not None:
        began, ends, what = loss.writing
        gone = record.gone.get(node)
        writing = f"the checkpoint ({what}) begun at {at(began)} would have been written at {at(ends)}"
        end = f", its instance gone at {at(gone)}" if gone is not None else ""
        detail = f"stopped at {at(stop)} by {by}{whose}: {writing}{end}"
        if gone is not None and ends > gone:  # whoever sent SIGTERM, the instance went first
            return Attributed(loss, Cause.WRITE_LONGER_THAN_NOTICE, detail)
        if who == "gpuwarden" and _TIMED_OUT in why and _DEADLINE_LESS_GRACE not in why:
            return Attributed(loss, Cause.TIMED_OUT, detail)
        if who == "gpuwarden":
            return Attributed(loss, Cause.CUT_BY_GPUWARDEN, detail)
        if who == "Karpenter":
            return Attributed(loss, Cause.CUT_BY_KARPENTER, detail)
        return Attributed(loss, Cause.WRITE_LONGER_THAN_NOTICE, detail)
    # the expiry, unless a notice after it stopped the pod (a do-not-disrupt pod the expiry left on
    # its node, then taken by a Spot interruption or a Capacity Block's end: that notice's cause)
    if node in record.expired and who != "gpuwarden" and (notice is None or notice <= record.expired[node]):
        return Attributed(loss, Cause.EXPIRED_BY_KARPENTER, f"stopped at {at(stop)} by {by}{whose}: the node expired")
    if notice is None:
        return Attributed(loss, Cause.STOPPED_WITHOUT_NOTICE, f"stopped at {at(stop)} by {by}{whose}")
    saved = loss.saved_at is not None and loss.saved_at <= stop
    if who == "gpuwarden" and _ACKNOWLEDGED in why and saved:
        assert loss.saved_at is not None
        detail = f"stopped at {at(stop)} by {by}{whose}: its last checkpoint was written at {at(loss.saved_at)}"
        return Attributed(loss, Cause.STALE_ACKNOWLEDGEMENT, detail)
    if who:
        return Attributed(loss, Cause.SIGTERM_BEFORE_ASKED, f"stopped at {at(stop)} by {by}{whose}")
    return Attributed(loss, Cause.UNHANDLED, f"stopped at {at(stop)} by its instance's end{whose}")


def _clock(notice: float | None) -> Any:
    """Times relative to the notice ("+58 s"), or absolute seconds into the run without one."""

    def show(t: float | None) -> str:
        if t is None:
            return "-"
        return f"{t - notice:+.0f} s after the notice" if notice is not None else f"{t:.0f} s into the run"

    return show


def lost_to_expiry(result: ArmResult) -> float:
    """GPU-minutes lost on nodes that expired: Karpenter's own expiry, or gpuwarden's drain planned
    for it (kind karpenter-expiry), whatever the cause of each loss."""
    record = _Record.of(result)
    nodes = set(record.expired) | record.expiry_drained
    lost = (loss.gpu_minutes for loss in result.ledger.losses if (loss.trigger_node or loss.node) in nodes)
    return round(float(sum(lost)), 1)


def by_cause(attributed: Iterable[Attributed]) -> dict[str, float]:
    """GPU-minutes lost per cause, the largest first."""
    totals: dict[str, float] = {}
    for item in attributed:
        totals[item.cause.value] = totals.get(item.cause.value, 0.0) + item.loss.gpu_minutes
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def savable(attributed: Iterable[Attributed]) -> float:
    """GPU-minutes lost to causes gpuwarden could have avoided (MEANING's flag)."""
    return round(sum(a.loss.gpu_minutes for a in attributed if MEANING[a.cause][1]), 1)
