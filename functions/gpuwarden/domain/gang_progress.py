"""How far a gang's checkpoint is, and what that means for its pods on a doomed node (pure;
docs/training-jobs.md). The membership and the leader: `domain.gangs`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwarden.domain.checkpoint import current_request
from gpuwarden.domain.gangs import By, Gang
from gpuwarden.domain.views import PodView


@dataclass(frozen=True)
class GangProgress:
    """The gang's checkpoint as its members say now (every asked pod, whichever event asked it)."""

    gang: str
    by: By
    asked: tuple[str, ...] = ()
    acknowledged: tuple[str, ...] = ()
    timed_out: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    #: Asked pods still expected to answer, and the latest time one of them may.
    waiting: tuple[str, ...] = ()
    until: datetime | None = None
    #: Pods that should be asked and carry no request yet (the next step asks them).
    unasked: tuple[str, ...] = ()
    #: Members created after the drain began (``joined_since``): ranks the job's controller started
    #: during it, from the checkpoint being written, so not asked for it.
    joined: tuple[str, ...] = ()

    @property
    def checkpointed(self) -> bool:
        """Every asked pod acknowledged, failed or timed out, and no pod is left to ask."""
        return not self.waiting and not self.unasked

    def as_result(self) -> dict[str, object]:
        """The result's ``checkpoints`` entry (docs/results.md)."""
        out: dict[str, object] = {
            "gang": self.gang,
            "by": self.by,
            "asked": list(self.asked),
            "acknowledged": list(self.acknowledged),
            "timed_out": list(self.timed_out),
        }
        if self.failed:
            out["failed"] = list(self.failed)
        if self.waiting:
            out["waiting"] = list(self.waiting)
        if self.joined:
            out["joined_since_asked"] = list(self.joined)
        return out


def progress(
    gang: Gang,
    event_id: str,
    now: datetime,
    deadline: datetime | None,
    default_timeout: int = 60,
    allow_exec: bool = True,
    since: datetime | None = None,
    joined_since: datetime | None = None,
) -> GangProgress:
    """Where the gang's checkpoint stands for ``event_id`` (a request another notice made for the
    gang counts as this one's, unless acknowledged before ``since``, the notice's time:
    `current_request`). A pod's wait ends at its request's time, never after ``deadline``. A
    member without a request that was created after ``joined_since`` (the drain's start) is a rank
    started since: counted in ``joined``, not asked."""
    asked: list[str] = []
    acked: list[str] = []
    timed_out: list[str] = []
    failed: list[str] = []
    waiting: list[str] = []
    unasked: list[str] = []
    joined: list[str] = []
    until: datetime | None = None
    for pod, _spec in gang.to_ask(default_timeout, allow_exec, leaving_too=True):
        request = current_request(pod, event_id, now, since)
        if request is None:
            if joined_since is not None and pod.created is not None and pod.created > joined_since:
                joined.append(pod.key)
            elif not pod.terminating:  # a pod already leaving is not asked any more
                unasked.append(pod.key)
            continue
        asked.append(pod.key)
        by = min(request.by, deadline) if deadline is not None else request.by
        if request.done:
            acked.append(pod.key)
        elif request.failed:
            failed.append(pod.key)
        elif now >= by:
            timed_out.append(pod.key)
        else:
            waiting.append(pod.key)
            until = by if until is None else max(until, by)
    return GangProgress(
        gang.key,
        gang.ref.by,
        tuple(asked),
        tuple(acked),
        tuple(timed_out),
        tuple(failed),
        tuple(waiting),
        until,
        tuple(unasked),
        tuple(joined),
    )


@dataclass(frozen=True)
class GangHold:
    """What the gang means for one of its pods on a doomed node, in a drain round."""

    gang: str
    #: Whether this pod is asked itself (False: a leader-mode member that only waits for its leader).
    asked: bool
    #: Every asked pod of the gang acknowledged, failed or timed out.
    checkpointed: bool = False
    #: The latest time an asked pod may still answer (None: no request out yet, or checkpointed).
    until: datetime | None = None
    reason: str = ""


def holds(gang: Gang, state: GangProgress, on_node: Iterable[PodView]) -> dict[str, GangHold]:
    """pod key → hold, for the gang's pods on the doomed node."""
    asked = set(state.asked) | set(state.unasked)
    members = {p.key for p in gang.members}
    out: dict[str, GangHold] = {}
    for pod in on_node:
        if pod.key not in members:
            continue
        if state.checkpointed:
            out[pod.key] = GangHold(gang.key, pod.key in asked, checkpointed=True)
            continue
        answered = len(state.acknowledged) + len(state.timed_out) + len(state.failed)
        total = answered + len(state.waiting) + len(state.unasked)
        when = f" until {state.until.isoformat()}" if state.until is not None else ""
        reason = f"waiting for gang {gang.key} to checkpoint ({answered} of {total} answered){when}"
        out[pod.key] = GangHold(gang.key, pod.key in asked, False, state.until, reason)
    return out


_LISTS = ("asked", "asked_earlier", "acknowledged", "timed_out", "failed", "waiting")


def asked_here(entries: list[dict[str, Any]], asked: set[str]) -> list[dict[str, Any]]:
    """The result's ``checkpoints`` as one run tells them: ``asked`` only the pods this run asked
    (its `checkpoint-requested` actions); a pod whose request an earlier run or notice made, and
    whose answer this run waited for, is ``asked_earlier`` (docs/results.md)."""
    out = []
    for entry in entries:
        seen = set(entry.get("asked", ())) | set(entry.get("asked_earlier", ()))
        told = {**entry, "asked": sorted(seen & asked)}
        earlier = sorted(seen - asked)
        told.pop("asked_earlier", None)
        if earlier:
            told["asked_earlier"] = earlier
        out.append(told)
    return out


_ALWAYS = ("asked", "acknowledged", "timed_out")


def merge_looks(before: Mapping[str, Any], look: Mapping[str, Any], *, waiting_from_look: bool) -> dict[str, Any]:
    """One gang's result entry from two looks at it: a pod asked, acknowledged, timed out or failed
    in either stays so (an evicted pod keeps its place); an answer replaces the wait it ended.
    ``waiting_from_look``: the later look of one run says who still waits; else (the looks of several
    runs side by side, a Capacity Block's nodes) every pod either saw waiting and nobody saw answered."""
    seen = {name: set(before.get(name, ())) | set(look.get(name, ())) for name in _LISTS}
    answered = seen["acknowledged"] | seen["timed_out"] | seen["failed"]
    seen["timed_out"] -= seen["acknowledged"]
    seen["failed"] -= seen["acknowledged"]
    seen["waiting"] = set(look.get("waiting", ())) if waiting_from_look else seen["waiting"] - answered
    merged: dict[str, Any] = {"gang": look["gang"], "by": look["by"]}
    merged |= {name: sorted(keys) for name, keys in seen.items() if keys or name in _ALWAYS}
    return merged


@dataclass(frozen=True)
class Looks:
    """The gangs a run asked or waited for, by gang key, each as its looks so far found it (the
    result's ``checkpoints``: docs/results.md). A value: each step answers the looks it took, and
    the run adds them up in order (a later look of one run says who still waits)."""

    by_gang: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __or__(self, later: Looks) -> Looks:
        merged = dict(self.by_gang)
        for key, look in later.by_gang.items():
            merged[key] = merge_looks(merged.get(key, {}), look, waiting_from_look=True)
        return Looks(merged)

    def with_look(self, look: Mapping[str, Any]) -> Looks:
        return self | Looks({look["gang"]: look})

    def as_result(self) -> list[dict[str, Any]] | None:
        """The result's ``checkpoints`` (None: no gang asked)."""
        return [dict(self.by_gang[k]) for k in sorted(self.by_gang)] or None
