"""What a drain of a node would do to each of its pods now (pure; docs/cli.md#plans): the one plan
behind `runbook plan`, `runbook drain --dry-run`, a kind's dry run and observe mode.

It is `drain.decide_round`'s answer, told as the step each pod will take:

* a ``wait`` is not a step: a pod waiting for its checkpoint acknowledgement will be evicted then,
  a pod waiting for its turn behind lower priorities will be evicted after them, a terminating pod
  is only waited for;
* the PodDisruptionBudgets are counted as the Eviction API counts them, pod after pod in the
  order the drain asks them to leave (lowest priority first, the pods it evicts now before those
  that first checkpoint): a PDB that allows one disruption over two pods lets one go and blocks
  the other (``blocked``, naming the PDB). Two pods of one priority are evicted at once, so which
  of them the API server admits is not known before: the plan names the first by name as going.
  A delete (involuntary, at deadline - grace) is not an eviction and takes no PDB's disruption;
  nor does the eviction of a Pending, finished or terminating pod, which the Eviction API admits
  without reading any PDB (`PodView.ignores_pdbs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import requested_by
from gpuwarden.domain.drain import DrainContext, PodStep, decide_round
from gpuwarden.domain.pdb import PdbView, pdbs_guarding
from gpuwarden.domain.views import PodView
from gpuwarden.domain.wording import count

PlanStep = Literal["signal", "evict", "delete", "blocked", "skip"]


@dataclass(frozen=True)
class PlanRow:
    """One pod's line of a plan."""

    pod: str
    step: PlanStep
    reason: str
    grace_seconds: int | None = None
    #: ``blocked``: the PodDisruptionBudget that allows no (more) disruption now.
    blocked_by: str | None = None
    #: The drain asks this pod to checkpoint first (a ``signal``, or a ``blocked`` that is asked first).
    asks: bool = False

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"pod": self.pod, "step": self.step, "reason": self.reason}
        if self.grace_seconds is not None:
            out["grace_seconds"] = self.grace_seconds
        if self.blocked_by is not None:
            out["blocked_by"] = self.blocked_by
        return out


def _as_taken(step: PodStep, pod: PodView) -> PlanRow:
    """`decide_round`'s `wait` is not a step: say which step the pod will take, and why."""
    if step.step != "wait":
        return PlanRow(step.pod, step.step, step.reason, step.grace_seconds, asks=step.step == "signal")
    if step.waits_on == "turn":
        return PlanRow(step.pod, "evict", f"{step.reason}: evicted after them")
    if step.waits_on == "grace":
        return PlanRow(step.pod, "skip", "already terminating: the drain only waits for it to stop")
    if step.waits_on == "gang":
        return PlanRow(step.pod, "evict", f"{step.reason}: evicted once the gang has checkpointed")
    by = requested_by(pod)
    until = f" or at {ann.rfc3339(by)}" if by is not None else ""
    return PlanRow(step.pod, "evict", f"{step.reason}: evicted when it acknowledges{until}")


def _leave_rank(row: PlanRow, pod: PodView) -> tuple[int, int]:
    """The order the drain asks pods to leave: evictions now before those after a checkpoint,
    lowest priority first within each."""
    return (0 if row.step == "evict" else 1, pod.priority)


def plan_round(pods: Iterable[PodView], ctx: DrainContext, pdbs: Iterable[PdbView]) -> list[PlanRow]:
    """Every pod on the node with the step a drain would take now, PDBs counted pod after pod."""
    pods = list(pods)
    by_key = {p.key: p for p in pods}
    rows = [_as_taken(step, by_key[step.pod]) for step in decide_round(pods, ctx)]
    pdbs = list(pdbs)
    left: dict[str, int | None] = {p.key: p.disruptions_allowed for p in pdbs}
    out: dict[str, PlanRow] = {r.pod: r for r in rows}
    acting = [r for r in rows if r.step in ("evict", "signal") and not by_key[r.pod].ignores_pdbs]
    for row in sorted(acting, key=lambda r: _leave_rank(r, by_key[r.pod])):
        guards = pdbs_guarding(by_key[row.pod], pdbs)
        full = next((g for g in guards if (n := left[g.key]) is not None and n <= 0), None)
        if full is None:
            for g in guards:
                n = left[g.key]
                left[g.key] = None if n is None else n - 1
            continue
        allowed = full.disruptions_allowed or 0
        guarded = sum(1 for r in acting if full in pdbs_guarding(by_key[r.pod], pdbs))
        taken = (
            f"allows {count(allowed, 'disruption')} now for the {guarded} pods it guards here: "
            f"{allowed} of them go (whichever eviction the API server admits first), the rest wait"
            if allowed
            else "allows no disruption now"
        )
        then = "deleted at deadline - its grace if still blocked" if ctx.involuntary else "a PDB is never overridden"
        reason = f"blocked by PDB {full.key}: {taken}; the eviction is retried, {then}"
        if row.step == "signal":
            reason = f"{row.reason}; then {reason}"
        out[row.pod] = PlanRow(row.pod, "blocked", reason, row.grace_seconds, full.key, asks=row.asks)
    return [out[r.pod] for r in rows]


def plan_counts(rows: Iterable[PlanRow | Mapping[str, object]]) -> dict[str, int]:
    """How many pods each step takes."""
    counts = dict.fromkeys(("signal", "evict", "delete", "blocked", "skip"), 0)
    for row in rows:
        step = row.step if isinstance(row, PlanRow) else str(row["step"])
        counts[step] += 1
    return counts
