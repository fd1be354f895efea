"""Runbook actions (docs/cli.md): one on-call request against one node.

The same use cases and decisions as the automated paths: a drain runs `disrupt`, as every kind's
does; `guard_and_mark` cordons, the checkpoint handshake asks, `ensure_replacement` launches, every
plan comes from `domain.drain.decide_round`. The manual kind's rules are in `run`, the read-only
actions (`plan`, `status`) in `read`; its hooks are its spec's (gpuwarden/kinds/manual.py).

Every request is written to the ledger under its own id (who asked, why, what came of it);
a request that acted on a node's event also leaves a line on that event's entry, which is
what `status` shows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.checkpoint import checkpoint_spec
from gpuwarden.domain.decide import drain_with
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.pdb import pdbs_guarding
from gpuwarden.domain.views import NodeView
from gpuwarden.domain.wording import count
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.gangs import ask_only
from gpuwarden.services.engine.hooks import Disruption, KindHooks, Marked, Ran
from gpuwarden.services.engine.karpenter import give_back_pods
from gpuwarden.services.engine.node_ops import find_node, pods_on
from gpuwarden.services.engine.pipeline import guard_and_mark
from gpuwarden.services.engine.plan import namespace_pdbs
from gpuwarden.services.engine.replace import ensure_replacement
from gpuwarden.services.engine.result import Result
from gpuwarden.services.engine.writes import Patch, annotate, release_node, update_node
from gpuwarden.services.runbook.read import plan_answer, plan_steps, status_answer
from gpuwarden.services.runbook.run import (
    FORCE_HINT,
    READ_ONLY_ACTIONS,
    Answer,
    DrainProgress,
    Progress,
    Run,
    done,
    manual_refusal,
    refusal,
    refuse,
    stopped,
    who,
)
from gpuwarden.sources import RunbookRequest
from gpuwarden.sources.runbook import RunbookAction

__all__ = ["READ_ONLY_ACTIONS", "DrainProgress", "Progress", "run_runbook"]

SOURCE = "gpuwarden.runbook"
_KNOWN_KINDS = frozenset(Kind)


def run_runbook(
    request: RunbookRequest,
    deps: Deps,
    hooks: KindHooks,
    *,
    drain_locally: bool = True,
    progress: Progress | None = None,
) -> Result:
    """Run one runbook action to its answer (a local drain to its end; deployed, the drain
    workflow takes over after the first rounds when ``drain_locally`` is False)."""
    if request.dry_run and not deps.dry_run:
        raise GpuwardenError("a dry-run request needs dry-run ports (wiring.dry_run_view): refusing to run it live")
    request_id = f"runbook-{deps.clock().strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    node = find_node(deps.kube, deps.cloud, request.instance_id, request.node, deps.policy.cluster)
    if node is None:
        # a script must not read a typo as success (docs/cli.md): failed, exit 1, naming what was not found
        reason = f"not found: {request.target} is not a node of cluster {deps.policy.cluster}"
        result = _result(request, deps, Recorder(deps, request_id), None, Answer("failed", reason), [], request_id)
        _record(request, deps, result, request_id)
        return result
    pods = pods_on(deps.kube, node.name)
    notice = _notice(request, deps, node, _event_id(request, node, request_id))
    run = Run(
        request=request,
        deps=deps,
        recorder=Recorder(deps, notice.event_id),
        node=node,
        pods=pods,
        notice=notice,
        pdbs=namespace_pdbs(deps, pods),
        hooks=hooks,
        drain_locally=drain_locally,
        progress=progress,
    )
    plan = plan_steps(run)
    result = _ACTIONS[request.action](run, plan)
    _record(request, deps, result, request_id)
    return result


# --------------------------------------------------------------------------- shared steps


def _event_id(request: RunbookRequest, node: NodeView, request_id: str) -> str:
    """The event the node's annotations and the pods' checkpoint requests are written under.

    cordon/drain resume a manual event already on the node (never take over another kind's:
    `mark_node` refuses); checkpoint/replace join whatever event holds the node, so a pod
    asked for a Spot warning is not asked again.
    """
    current = node.annotations.get(ann.EVENT_ID)
    if not current:
        return request_id
    if request.action in ("checkpoint", "replace", "status"):
        return current
    return current if node.annotations.get(ann.KIND) == Kind.MANUAL.value else request_id


def _notice(request: RunbookRequest, deps: Deps, node: NodeView, event_id: str) -> Notice:
    return Notice(
        kind=Kind.MANUAL,
        event_id=event_id,
        instance_id=request.instance_id or node.instance_id,
        node_name=node.name,
        deadline=None,
        event_time=deps.clock(),
        source=SOURCE,
        detail_type="Runbook Action",
        detail={"action": request.action, "caller": deps.caller, "reason": request.reason, "force": request.force},
    )


def manual_guard(d: Disruption) -> str | None:
    """The manual kind's guard: the windows and do-not-disrupt refuse it unless forced."""
    return manual_refusal(d.deps, d.node, d.pods, bool(d.notice.detail.get("force")))


def _drain_started(d: Disruption) -> str | None:
    """The drain's start, written once (what `status` shows)."""
    at = ann.rfc3339(d.deps.clock())
    written = update_node(d.deps.kube, d.node, lambda n: None if n.annotations.get(ann.DRAIN_STARTED) else _at(at))
    d.node = written.obj or d.node
    return None


def _at(at: str) -> Patch:
    return annotate({ann.DRAIN_STARTED: at})


# --------------------------------------------------------------------------- cordon / uncordon


def _disruption(run: Run, hooks: KindHooks) -> Disruption:
    d = Disruption(run.notice, run.deps, run.node, hooks, run.drain_locally, _pods=run.pods)
    d.recorder = run.recorder
    return d


def _take_node(run: Run, d: Disruption) -> Marked | Answer:
    """Cordon + taint for a manual action, after the windows and do-not-disrupt allow it."""
    taken = guard_and_mark(d, who(run))
    if taken.refused is not None:
        return refuse(run, taken.refused)
    if taken.held_by is not None:
        return Answer("ignored", taken.held_reason())
    return taken


def _cordon(run: Run, plan: list[dict[str, Any]]) -> Answer:
    taken = _take_node(run, _disruption(run, run.hooks))
    if isinstance(taken, Answer):
        return taken
    run.recorder.flush()
    if taken.changed:
        did, would = f"cordoned and tainted {run.node.name}", f"would cordon and taint {run.node.name}"
        return done(run, True, f"{did} ({who(run)})", f"{would} ({who(run)})")
    return done(run, False, f"{run.node.name} was already cordoned by gpuwarden for {run.notice.event_id}")


def _uncordon(run: Run, plan: list[dict[str, Any]]) -> Answer:
    node = run.node
    kind = node.annotations.get(ann.KIND)
    if kind and kind in _KNOWN_KINDS and not run.deps.is_voluntary(kind) and not run.request.force:
        why = f"{node.name} is held for {kind} ({node.annotations.get(ann.EVENT_ID)}): its instance is going away"
        return refuse(run, why + FORCE_HINT)
    cordoned_by_us = node.annotations.get(ann.CORDONED_BY_US) == "true"
    released = release_node(run.deps.kube, node)
    kept = " it stays cordoned: someone else cordoned it" if node.unschedulable and not cordoned_by_us else ""
    if not released.written or released.obj is None:
        return Answer("ignored", f"nothing of gpuwarden's on {node.name};{kept or ' it is schedulable'}")
    what = "gpuwarden's taint, " + ("cordon and annotations" if cordoned_by_us else "and annotations")
    if given_back := give_back_pods(run.deps.kube, node.name):
        what += f", and the do-not-disrupt it added on {', '.join(given_back)}"
    run.recorder.add(ActionType.RELEASE, released.obj, reason=f"removed {what} ({who(run)})")
    run.recorder.flush()
    kept = f";{kept}" if kept else ""
    return done(run, True, f"{node.name}: removed {what}{kept}", f"would remove {what} from {node.name}{kept}")


# --------------------------------------------------------------------------- checkpoint / replace


def _checkpoint(run: Run, plan: list[dict[str, Any]]) -> Answer:
    asking = ask_only(run.recorder, run.node, run.pods, None)
    asked = [a["pod"] for a in run.recorder.actions if a["type"] is ActionType.CHECKPOINT_REQUESTED]
    if asked:
        by_gang = asking.looks.by_gang
        gangs = f" and their gangs ({', '.join(sorted(by_gang))})" if by_gang else ""
        pods = f"{count(len(asked), 'pod')} on {run.node.name}{gangs} to checkpoint ({who(run)})"
        answer = done(run, True, f"asked {pods}", f"would ask {pods}")
        return replace(answer, looks=asking.looks)
    opted = [p.key for p in run.pods if checkpoint_spec(p) is not None]
    if opted:
        return done(run, False, f"every opted-in pod on {run.node.name} was already asked for {run.notice.event_id}")
    return Answer("ignored", f"no pod on {run.node.name} opted into a checkpoint ({ann.CHECKPOINT})")


def _replace(run: Run, plan: list[dict[str, Any]]) -> Answer:
    refused = refusal(run)
    if refused is not None:
        return refuse(run, refused)
    replaced = ensure_replacement(run.recorder, run.node, run.notice, run.pods)
    run.recorder.flush()
    if replaced.type is ActionType.REPLACEMENT:
        launched = f"{replaced.target} for {run.node.name}: {replaced.reason}"
        return done(run, True, f"launched {launched}", f"would launch {launched}")
    if replaced.type is ActionType.REPLACEMENT_FAILED:
        return Answer("failed", f"replacement for {run.node.name} failed: {replaced.reason}")
    return Answer("ignored", f"no replacement launched for {run.node.name}: {replaced.reason}")


# --------------------------------------------------------------------------- drain


def _reporter(run: Run, started: datetime) -> Callable[[DrainState], None] | None:
    if run.progress is None:
        return None
    progress = run.progress
    guards = {p.key: g[0].key for p in run.pods if (g := pdbs_guarding(p, run.pdbs))}

    def report(state: DrainState) -> None:
        blocked: dict[str, int] = {}
        for pod in state.blocked_pods:
            pdb = guards.get(pod, "?")
            blocked[pdb] = blocked.get(pdb, 0) + 1
        waits = state.waiting_on
        progress(
            DrainProgress(
                node=state.node,
                remaining=state.remaining,
                blocked=blocked,
                elapsed_seconds=(run.deps.clock() - started).total_seconds(),
                done=state.done,
                outcome=state.outcome,
                checkpoint=waits.get("checkpoint", 0),
                gang=waits.get("gang", 0),
                grace=waits.get("grace", 0),
                turn=waits.get("turn", 0),
            )
        )

    return report


def _drain_answer(run: Run, state: DrainState, why: str) -> Answer:
    """``why``: what the drain was for (`who`), and that the drain workflow took over when a failure
    after the mark was handed on."""
    name = run.node.name
    seconds = f"{(run.deps.clock() - state.started_at).total_seconds():.0f} s"
    if state.outcome.drained:
        return Answer("handled", f"drained {name} in {seconds} ({why})", drain=state)
    if not state.done:
        return Answer("handled", f"draining {name}: the drain workflow continues ({why})", drain=state)
    held = "; ".join(state.blocked[:5]) or "; ".join(state.waiting[:5])
    limit = run.deps.policy.drain.voluntary_limit_seconds
    return Answer("failed", f"{name} not drained after {limit} s, PDBs are never overridden: {held}", drain=state)


#: The manual drain's steps: cordon, checkpoint, drain; no replacement (`replace` is its own action).
MANUAL_DRAIN = drain_with("manual drain", replace=False)


def _drain(run: Run, plan: list[dict[str, Any]]) -> Result:
    """The drain goes through `disrupt`, as every kind's does (docs/architecture.md, "The pipeline"):
    the manual kind's guard, the mark, the checkpoint requests, the rounds, and the hand-on to the drain
    workflow when a failure after the mark leaves the drain unfinished. The runbook's hooks answer as
    every runbook action does (refused, held, drained, or what a dry run would do)."""
    admission = replace(
        run.hooks.admission,
        plan=MANUAL_DRAIN,
        after_mark=_drain_started,
        stopped=lambda stop: _answered(run, plan, stopped(run, stop)),
    )
    settlement = replace(
        run.hooks.settlement, answer=lambda d, _, ran, why: _answered(run, plan, _ran(run, d, ran, plan, why))
    )
    hooks = replace(run.hooks, admission=admission, settlement=settlement)
    on_round = _reporter(run, run.deps.clock())
    return disrupt(
        run.notice,
        run.deps,
        hooks,
        run.drain_locally,
        node=run.node,
        recorder=run.recorder,
        why=who(run),
        pods=run.pods,
        on_round=on_round,
    )


def _ran(run: Run, d: Disruption, ran: Ran, plan: list[dict[str, Any]], why: str) -> Answer:
    """The drain's answer once the sequence ran: drained, going on in the drain workflow, not drained
    in the time allowed, or what a dry run would do."""
    if ran.state is None:
        moving = sum(1 for s in plan if s["step"] != "skip")
        return Answer("dry-run", f"dry run: would cordon {d.node.name} and drain {moving} pods (see plan)")
    return replace(_drain_answer(run, ran.state, why), looks=ran.looks)


def _answering(action: Callable[[Run, list[dict[str, Any]]], Answer]) -> Callable[[Run, list[dict[str, Any]]], Result]:
    return lambda run, plan: _answered(run, plan, action(run, plan))


#: The one table of runbook actions (their names are `sources.runbook.RUNBOOK_ACTIONS`).
_ACTIONS: dict[RunbookAction, Callable[[Run, list[dict[str, Any]]], Result]] = {
    "plan": _answering(plan_answer),
    "status": _answering(status_answer),
    "cordon": _answering(_cordon),
    "uncordon": _answering(_uncordon),
    "drain": _drain,
    "checkpoint": _answering(_checkpoint),
    "replace": _answering(_replace),
}


# --------------------------------------------------------------------------- answer and ledger


def _answered(run: Run, plan: list[dict[str, Any]], answer: Answer) -> Result:
    return _result(run.request, run.deps, run.recorder, run.node, answer, plan, run.notice.event_id)


def _result(
    request: RunbookRequest,
    deps: Deps,
    recorder: Recorder,
    node: NodeView | None,
    answer: Answer,
    plan: list[dict[str, Any]],
    event_id: str,
) -> Result:
    return Result(
        outcome=answer.outcome,
        kind=Kind.MANUAL.value,
        action=request.action,
        dry_run=deps.dry_run,
        node=node.name if node else request.node,
        instance_id=request.instance_id or (node.instance_id if node else None),
        event_id=event_id,
        reason=answer.reason,
        plan=plan,
        actions=recorder.actions,
        checkpoints=answer.looks.as_result(),
        status=answer.status,
        drain=answer.drain.model_dump(mode="json") if answer.drain else None,
    )


def _record(request: RunbookRequest, deps: Deps, result: Result, request_id: str) -> None:
    """Who asked what, why, and what came of it; cross-referenced from the node's event."""
    entry = {
        "kind": Kind.MANUAL.value,
        "action": request.action,
        "node": result.node or request.target,
        "outcome": result.outcome,
        "result": result.reason,
        "reason": request.reason,
        "caller": deps.caller,
        "dry_run": deps.dry_run,
        "force": request.force,
        "event_id": result.event_id or request_id,
    }
    deps.ledger.record(request_id, entry)
    if result.event_id and result.event_id != request_id and request.action not in READ_ONLY_ACTIONS:
        why = f" ({request.reason})" if request.reason else ""
        line = f"{request.action} by {deps.caller}: {result.outcome}{why}"
        deps.ledger.record(result.event_id, {f"runbook {request_id}": line})
