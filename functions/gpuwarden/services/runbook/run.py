"""What every runbook action shares: the request's run, its answer, and the manual kind's rules.

A runbook request is the `manual` kind: voluntary, so without ``force`` the budget windows and
`karpenter.sh/do-not-disrupt` may refuse it; ``force`` overrides those two and never a
PodDisruptionBudget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.gang_progress import Looks
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.pdb import PdbView
from gpuwarden.domain.protections import do_not_disrupt_refusal
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.hooks import KindHooks, Stop
from gpuwarden.services.engine.node_ops import voluntary_verdict_of
from gpuwarden.services.engine.plan import Plan as DrainPlan
from gpuwarden.services.engine.result import Outcome
from gpuwarden.sources import RunbookRequest

#: Actions that only read: they run on dry-run ports whatever the request says.
READ_ONLY_ACTIONS = frozenset({"plan", "status"})
FORCE_HINT = " (force overrides it)"


@dataclass(frozen=True)
class DrainProgress:
    """One line of a drain's progress, for a terminal: what is left and what holds it, each count
    what it says (the drain's typed `DrainState.waiting_on`)."""

    node: str
    remaining: int
    #: PodDisruptionBudget ("namespace/name") → pods whose eviction it refuses now
    blocked: dict[str, int]
    elapsed_seconds: float
    done: bool
    outcome: str
    #: opted-in pods asked to checkpoint whose acknowledgement is awaited (their own handshake)
    checkpoint: int = 0
    #: pods that answered, or were not asked, waiting for the rest of their gang's checkpoint
    gang: int = 0
    #: pods already asked to leave, within their grace period
    grace: int = 0
    #: pods waiting for their turn behind pods of lower priority
    turn: int = 0


Progress = Callable[[DrainProgress], None]


@dataclass
class Run:
    request: RunbookRequest
    deps: Deps
    recorder: Recorder
    node: NodeView
    pods: list[PodView]
    notice: Notice
    pdbs: list[PdbView]
    #: The manual kind's hooks (its spec's: gpuwarden/kinds/manual.py).
    hooks: KindHooks
    drain_locally: bool
    progress: Progress | None
    #: What a drain of the node would do, worked out once per request (`read.drain_plan`).
    plan: DrainPlan | None = None


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    reason: str
    status: dict[str, Any] | None = None
    drain: DrainState | None = None
    #: The gangs the action asked, as their last look found them (the result's ``checkpoints``).
    looks: Looks = field(default_factory=Looks)


def who(run: Run) -> str:
    why = f": {run.request.reason}" if run.request.reason else ""
    return f"manual {run.request.action}, asked by {run.deps.caller}{why}"


def manual_refusal(deps: Deps, node: NodeView, pods: list[PodView], force: bool) -> str | None:
    """Why a voluntary disruption must not happen now (a window, the NodePool's budgets, then
    do-not-disrupt), or None. The first refusal is the reason given, whatever else would also refuse."""
    if force:
        return None
    refused = voluntary_verdict_of(deps, node, lambda: pods, Kind.MANUAL).refused
    refused = refused or do_not_disrupt_refusal(Kind.MANUAL, node, pods, force)
    return refused + FORCE_HINT if refused else None


def refusal(run: Run) -> str | None:
    return manual_refusal(run.deps, run.node, run.pods, run.request.force)


def refuse(run: Run, why: str) -> Answer:
    run.recorder.add(ActionType.REFUSED, run.node, reason=f"{who(run)}; refused: {why}")
    run.recorder.flush()
    return Answer("ignored", f"{run.request.action} of {run.node.name} refused: {why}")


def stopped(run: Run, stop: Stop) -> Answer:
    """A guard refused (a window, the NodePool's budgets or do-not-disrupt, without ``force``), or
    another notice holds the node: the sequence stopped before acting."""
    return refuse(run, stop.reason) if stop.refused else Answer("ignored", stop.reason)


def done(run: Run, changed: bool, reason: str, would: str | None = None) -> Answer:
    """The answer of an action that ran: ``reason`` says what it did; a dry run says ``would`` (what
    it would do), or ``reason`` when that states a fact (nothing to do)."""
    if run.deps.dry_run:
        return Answer("dry-run", f"dry run: {would if would is not None and changed else reason}")
    return Answer("handled" if changed else "duplicate", reason)
