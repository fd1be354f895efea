"""Runbook actions (CONTRACT §5): one on-call request against one node.

The same use cases and decisions as the automated paths: `mark_node` cordons, the checkpoint
handshake asks, `drain_step` drains, `ensure_replacement` launches, and every plan comes from
`domain.drain.decide_round`. A runbook request is the `manual` kind: voluntary, so without
``force`` the budget windows and `karpenter.sh/do-not-disrupt` may refuse it; ``force``
overrides those two and never a PodDisruptionBudget.

Every request is written to the ledger under its own id (who asked, why, what came of it);
a request that acted on a node's event also leaves a line on that event's entry, which is
what `status` shows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import acknowledged, checkpoint_spec, delivery_failed, requested_by, requested_for
from gpuwarden.domain.decide import do_not_disrupt_reason, window_refusal
from gpuwarden.domain.drain import DrainContext, PodStep, decide_round
from gpuwarden.domain.errors import Conflict, GpuwardenError, KubeError
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.pdb import PdbView, blocking_pdb, pdb_from_json, pdbs_guarding
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.checkpoint import request_checkpoints
from gpuwarden.services.context import Deps, Recorder
from gpuwarden.services.drain import DrainState, drain_step
from gpuwarden.services.node_ops import MarkResult, find_node, mark_node, window_allowance
from gpuwarden.services.replace import ensure_replacement
from gpuwarden.services.result import Outcome, Result
from gpuwarden.sources import RunbookRequest

#: Actions that only read: they run on dry-run ports whatever the request says.
READ_ONLY_ACTIONS = frozenset({"plan", "status"})
SOURCE = "gpuwarden.runbook"
_POOL_SIZE = 16
_MAX_CONFLICTS = 8
_FORCE_HINT = " (force overrides it)"


@dataclass(frozen=True)
class DrainProgress:
    """One line of a drain's progress, for a terminal: what is left and what holds it."""

    node: str
    remaining: int
    waiting: int
    #: PodDisruptionBudget ("namespace/name") → pods whose eviction it refuses now
    blocked: dict[str, int]
    elapsed_seconds: float
    done: bool
    outcome: str


Progress = Callable[[DrainProgress], None]


@dataclass
class _Run:
    request: RunbookRequest
    deps: Deps
    recorder: Recorder
    node: NodeView
    pods: list[PodView]
    notice: Notice
    pdbs: list[PdbView]
    drain_locally: bool
    progress: Progress | None


@dataclass(frozen=True)
class _Answer:
    outcome: Outcome
    reason: str
    status: dict[str, Any] | None = None
    drain: DrainState | None = None


def run_runbook(
    request: RunbookRequest,
    deps: Deps,
    *,
    drain_locally: bool = True,
    progress: Progress | None = None,
) -> Result:
    """Run one runbook action to its answer (a local drain to its end; deployed, the drain
    workflow takes over after the first rounds when ``drain_locally`` is False)."""
    if request.dry_run and not deps.dry_run:
        raise GpuwardenError("a dry-run request needs dry-run ports (wiring.dry_run_view): refusing to run it live")
    request_id = f"runbook-{deps.clock().strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    node = find_node(deps.kube, deps.cloud, request.instance_id, request.node)
    if node is None:
        reason = f"{request.target} is not a node of cluster {deps.policy.cluster}"
        result = _result(request, deps, Recorder(deps, request_id), None, _Answer("ignored", reason), [], request_id)
        _record(request, deps, result, request_id)
        return result
    pods = [p for p in deps.kube.list_pods_on_node(node.name) if p.node_name == node.name]
    notice = _notice(request, deps, node, _event_id(request, node, request_id))
    run = _Run(
        request=request,
        deps=deps,
        recorder=Recorder(deps, notice.event_id),
        node=node,
        pods=pods,
        notice=notice,
        pdbs=_pdbs(deps, pods),
        drain_locally=drain_locally,
        progress=progress,
    )
    plan = plan_steps(run)
    answer = _ACTIONS[request.action](run, plan)
    result = _result(request, deps, run.recorder, node, answer, plan, notice.event_id)
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


def _pdbs(deps: Deps, pods: list[PodView]) -> list[PdbView]:
    namespaces = sorted({p.namespace for p in pods if not p.is_daemonset and not p.is_mirror and not p.finished})
    return [pdb_from_json(obj) for namespace in namespaces for obj in deps.kube.list_pdbs(namespace)]


def _who(run: _Run) -> str:
    why = f": {run.request.reason}" if run.request.reason else ""
    return f"manual {run.request.action}, asked by {run.deps.caller}{why}"


def refusal(run: _Run) -> str | None:
    """Why a voluntary disruption must not happen now (do-not-disrupt, a window), or None."""
    if run.request.force:
        return None
    held = do_not_disrupt_reason(run.node, run.pods)
    if held is not None:
        return held + _FORCE_HINT
    deps = run.deps
    if not deps.policy.windows:
        return None
    refused = window_refusal(window_allowance(deps.kube, deps.policy.windows, deps.window_clock(), run.node))
    return refused + _FORCE_HINT if refused else None


def _refuse(run: _Run, why: str) -> _Answer:
    run.recorder.add("refused", run.node, reason=f"{_who(run)}; refused: {why}")
    run.recorder.flush()
    return _Answer("ignored", f"{run.request.action} of {run.node.name} refused: {why}")


def _done(run: _Run, changed: bool, reason: str) -> _Answer:
    if run.deps.dry_run:
        return _Answer("dry-run", f"dry run: {reason}")
    return _Answer("handled" if changed else "duplicate", reason)


# --------------------------------------------------------------------------- plan


def _as_taken(step: PodStep, pod: PodView) -> PodStep:
    """`decide_round`'s `wait` is not a step: say which step the pod will take, and why."""
    if step.step != "wait":
        return step
    if step.held_for is not None:
        return PodStep(step.pod, "evict", step.reason)
    if pod.terminating:
        return PodStep(step.pod, "skip", "already terminating: the drain only waits for it to stop")
    by = requested_by(pod)
    until = f" or at {ann.rfc3339(by)}" if by is not None else ""
    return PodStep(step.pod, "evict", f"checkpoint requested: evicted when it acknowledges{until}")


def _explain(step: PodStep, pod: PodView, pdbs: list[PdbView]) -> dict[str, Any]:
    out = _as_taken(step, pod).as_dict()
    if out["step"] in ("evict", "signal"):
        pdb = blocking_pdb(pod, pdbs)
        if pdb is not None:
            out["reason"] = (
                f"{out['reason']}; PDB {pdb.key} allows no disruption now: the eviction waits "
                "(a runbook drain never overrides a PDB)"
            )
            out["blocked_by"] = pdb.key
    return out


def plan_steps(run: _Run) -> list[dict[str, Any]]:
    """What a drain of the node would do to every pod on it now, from the drain's own decisions."""
    policy = run.deps.policy
    ctx = DrainContext(
        event_id=run.notice.event_id,
        involuntary=False,
        deadline=None,
        now=run.deps.clock(),
        default_checkpoint_timeout=policy.checkpoint.default_timeout_seconds,
        allow_exec=policy.checkpoint.allow_exec,
    )
    by_key = {p.key: p for p in run.pods}
    return [_explain(step, by_key[step.pod], run.pdbs) for step in decide_round(run.pods, ctx)]


def _plan(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    counts = {step: sum(1 for s in plan if s["step"] == step) for step in ("signal", "evict", "skip")}
    blocked = sum(1 for s in plan if "blocked_by" in s)
    reason = (
        f"a drain of {run.node.name} now would ask {counts['signal']} pods to checkpoint, "
        f"evict {counts['evict'] + counts['signal']} and leave {counts['skip']}"
    )
    if blocked:
        reason += f"; {blocked} are held by a PDB that allows no disruption now"
    refused = refusal(run)
    if refused:
        reason += f"; a drain now would be refused: {refused}"
    return _Answer("dry-run" if run.request.dry_run else "handled", reason)


# --------------------------------------------------------------------------- status


def _waiting_for_checkpoint(node: NodeView, pods: list[PodView]) -> list[dict[str, Any]]:
    event_id = node.annotations.get(ann.EVENT_ID)
    waiting = []
    for pod in pods:
        by = requested_by(pod)
        if by is None or pod.finished:
            continue
        current = pod.annotations.get(ann.CHECKPOINT_EVENT, "")
        if event_id is not None and not requested_for(pod, event_id):
            continue
        if acknowledged(pod, current) or delivery_failed(pod, current):
            continue
        spec = checkpoint_spec(pod)
        mode = getattr(spec, "mode", None)
        waiting.append({"pod": pod.key, "mode": mode, "requested_by": ann.rfc3339(by)})
    return waiting


def _blocked_by_pdb(pods: list[PodView], pdbs: list[PdbView]) -> list[dict[str, Any]]:
    out = []
    for pod in pods:
        if pod.is_daemonset or pod.is_mirror:
            continue
        pdb = blocking_pdb(pod, pdbs)
        if pdb is not None:
            out.append({"pod": pod.key, "pdb": pdb.key, "disruptions_allowed": pdb.disruptions_allowed})
    return out


def _status(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    node = run.node
    notes = node.annotations
    event_id = notes.get(ann.EVENT_ID)
    status: dict[str, Any] = {
        "instance_id": node.instance_id,
        "nodepool": node.nodepool,
        "unschedulable": node.unschedulable,
        "cordoned_by_gpuwarden": notes.get(ann.CORDONED_BY_US) == "true",
        "taints": [t.as_dict() for t in node.taints],
        "event": {
            "id": event_id,
            "kind": notes.get(ann.KIND),
            "deadline": notes.get(ann.DEADLINE),
            "replacement": notes.get(ann.REPLACEMENT),
            "drain_started": notes.get(ann.DRAIN_STARTED),
            "drain_completed": notes.get(ann.DRAIN_COMPLETED),
        },
        "annotations": {k: v for k, v in sorted(notes.items()) if k.startswith(ann.PREFIX)},
        "pods": len(run.pods),
        "waiting_for_checkpoint": _waiting_for_checkpoint(node, run.pods),
        "blocked_by_pdb": _blocked_by_pdb(run.pods, run.pdbs),
        "ledger": run.deps.ledger.get(event_id) if event_id else None,
    }
    held = f"held for {notes.get(ann.KIND)} ({event_id})" if event_id else "not held by gpuwarden"
    cordon = "cordoned" if node.unschedulable else "schedulable"
    if node.unschedulable and not status["cordoned_by_gpuwarden"]:
        cordon += " (not by gpuwarden)"
    reason = (
        f"{node.name}: {held}, {cordon}; {len(status['waiting_for_checkpoint'])} pods waiting on a checkpoint, "
        f"{len(status['blocked_by_pdb'])} blocked by a PDB"
    )
    return _Answer("dry-run" if run.request.dry_run else "handled", reason, status=status)


# --------------------------------------------------------------------------- cordon / uncordon


def _take_node(run: _Run) -> MarkResult | _Answer:
    """Cordon + taint for a manual action, after the windows and do-not-disrupt allow it."""
    refused = refusal(run)
    if refused is not None:
        return _refuse(run, refused)
    mark = mark_node(run.deps.kube, run.node, run.notice)
    if mark.held_by is not None:
        return _Answer("ignored", f"{run.node.name} is already being handled for {mark.held_by}")
    if mark.changed:
        run.recorder.add("cordon", mark.node, taint=f"{ann.TAINT_KEY}=manual:NoSchedule", reason=_who(run))
    return mark


def _cordon(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    mark = _take_node(run)
    if isinstance(mark, _Answer):
        return mark
    run.recorder.flush()
    if mark.changed:
        return _done(run, True, f"cordoned and tainted {run.node.name} ({_who(run)})")
    return _done(run, False, f"{run.node.name} was already cordoned by gpuwarden for {run.notice.event_id}")


def _release_patch(node: NodeView) -> dict[str, Any] | None:
    """Undo only what gpuwarden wrote: its taint, its own cordon, its annotations."""
    ours = [k for k in node.annotations if k.startswith(ann.PREFIX)]
    tainted = any(t.key == ann.TAINT_KEY for t in node.taints)
    if not ours and not tainted:
        return None
    spec: dict[str, Any] = {"taints": [t.as_dict() for t in node.taints if t.key != ann.TAINT_KEY]}
    if node.annotations.get(ann.CORDONED_BY_US) == "true":
        spec["unschedulable"] = None
    return {"metadata": {"annotations": dict.fromkeys(ours)}, "spec": spec}


def _release(run: _Run) -> NodeView | None:
    kube, node = run.deps.kube, run.node
    for _ in range(_MAX_CONFLICTS):
        patch = _release_patch(node)
        if patch is None:
            return None
        try:
            return kube.patch_node(node.name, patch, node.resource_version)
        except Conflict:
            fresh = kube.get_node(node.name)
            if fresh is None:
                raise KubeError(f"node {node.name} disappeared while being uncordoned", status=404) from None
            node = fresh
    raise KubeError(f"node {node.name}: {_MAX_CONFLICTS} write conflicts in a row", status=409)


def _uncordon(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    node = run.node
    kind = node.annotations.get(ann.KIND)
    if kind and kind in {k.value for k in Kind if not k.voluntary} and not run.request.force:
        why = f"{node.name} is held for {kind} ({node.annotations.get(ann.EVENT_ID)}): its instance is going away"
        return _refuse(run, why + _FORCE_HINT)
    cordoned_by_us = node.annotations.get(ann.CORDONED_BY_US) == "true"
    released = _release(run)
    kept = " it stays cordoned: someone else cordoned it" if node.unschedulable and not cordoned_by_us else ""
    if released is None:
        return _Answer("ignored", f"nothing of gpuwarden's on {node.name};{kept or ' it is schedulable'}")
    what = "removed gpuwarden's taint, " + ("cordon and annotations" if cordoned_by_us else "and annotations")
    run.recorder.add("release", released, reason=f"{what} ({_who(run)})")
    run.recorder.flush()
    return _done(run, True, f"{node.name}: {what}" + (f";{kept}" if kept else ""))


# --------------------------------------------------------------------------- checkpoint / replace


def _checkpoint(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    with ThreadPoolExecutor(max_workers=_POOL_SIZE) as pool:
        for future in request_checkpoints(run.recorder, run.node, run.pods, None, pool):
            future.result()
    run.recorder.flush()
    asked = [a["pod"] for a in run.recorder.actions if a["type"] == "checkpoint-requested"]
    if asked:
        return _done(run, True, f"asked {len(asked)} pods on {run.node.name} to checkpoint ({_who(run)})")
    opted = [p.key for p in run.pods if checkpoint_spec(p) is not None]
    if opted:
        return _done(run, False, f"every opted-in pod on {run.node.name} was already asked for {run.notice.event_id}")
    return _Answer("ignored", f"no pod on {run.node.name} opted into a checkpoint ({ann.CHECKPOINT})")


def _replace(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    refused = refusal(run)
    if refused is not None:
        return _refuse(run, refused)
    ensure_replacement(run.recorder, run.node, run.notice, run.pods)
    run.recorder.flush()
    last = run.recorder.actions[-1]
    if last["type"] == "replacement":
        return _done(run, True, f"launched {last['target']} for {run.node.name}: {last['reason']}")
    if last["type"] == "replacement-failed":
        return _Answer("failed", f"replacement for {run.node.name} failed: {last['reason']}")
    return _Answer("ignored", f"no replacement launched for {run.node.name}: {last['reason']}")


# --------------------------------------------------------------------------- drain


def _reporter(run: _Run, started: datetime) -> Callable[[DrainState], None]:
    guards = {p.key: g[0].key for p in run.pods if (g := pdbs_guarding(p, run.pdbs))}

    def report(state: DrainState) -> None:
        if run.progress is None:
            return
        blocked: dict[str, int] = {}
        for entry in state.blocked:
            pdb = guards.get(entry.split(": ", 1)[0], "?")
            blocked[pdb] = blocked.get(pdb, 0) + 1
        run.progress(
            DrainProgress(
                node=state.node,
                remaining=state.remaining,
                waiting=len(state.waiting),
                blocked=blocked,
                elapsed_seconds=(run.deps.clock() - started).total_seconds(),
                done=state.done,
                outcome=state.outcome,
            )
        )

    return report


def _first_rounds(run: _Run, node: NodeView, state: DrainState, report: Callable[[DrainState], None]) -> DrainState:
    """Ask for checkpoints and drain while the deliveries (exec, POST) are under way."""
    with ThreadPoolExecutor(max_workers=_POOL_SIZE) as pool:
        deliveries: list[Future[None]] = request_checkpoints(run.recorder, node, run.pods, None, pool)
        state = drain_step(run.recorder, state, pool)
        report(state)
        while not state.done and not all(f.done() for f in deliveries):
            wait(deliveries, timeout=state.wait_seconds, return_when="FIRST_COMPLETED")
            state = drain_step(run.recorder, state, pool)
            report(state)
        for future in deliveries:
            future.result()
    return state


def _drain_loop(run: _Run, node: NodeView) -> DrainState:
    deps = run.deps
    started = deps.clock()
    report = _reporter(run, started)
    state = DrainState(node=node.name, event_id=run.notice.event_id, kind=Kind.MANUAL, started_at=started)
    state = _first_rounds(run, node, state, report)
    if not state.done and deps.start_drain is not None and not run.drain_locally:
        deps.start_drain(state.model_dump(mode="json"))
        return state
    while not state.done:
        deps.sleep(state.wait_seconds)
        state = drain_step(run.recorder, state)
        report(state)
    return state


def _drain_answer(run: _Run, state: DrainState) -> _Answer:
    name = run.node.name
    seconds = f"{(run.deps.clock() - state.started_at).total_seconds():.0f} s"
    if state.outcome.startswith("drained"):
        return _Answer("handled", f"drained {name} in {seconds} ({_who(run)})", drain=state)
    if not state.done:
        return _Answer("handled", f"draining {name}: the drain workflow continues ({_who(run)})", drain=state)
    held = "; ".join(state.blocked[:5]) or "; ".join(state.waiting[:5])
    limit = run.deps.policy.drain.voluntary_limit_seconds
    return _Answer("failed", f"{name} not drained after {limit} s, PDBs are never overridden: {held}", drain=state)


def _mark_drain_started(run: _Run, node: NodeView) -> NodeView:
    if node.annotations.get(ann.DRAIN_STARTED):
        return node
    patch = {"metadata": {"annotations": {ann.DRAIN_STARTED: ann.rfc3339(run.deps.clock())}}}
    return run.deps.kube.patch_node(node.name, patch, None)


def _drain(run: _Run, plan: list[dict[str, Any]]) -> _Answer:
    mark = _take_node(run)
    if isinstance(mark, _Answer):
        return mark
    node = _mark_drain_started(run, mark.node)
    if run.deps.dry_run:
        with ThreadPoolExecutor(max_workers=_POOL_SIZE) as pool:
            for future in request_checkpoints(run.recorder, node, run.pods, None, pool):
                future.result()
        moving = sum(1 for s in plan if s["step"] != "skip")
        return _Answer("dry-run", f"dry run: would cordon {node.name} and drain {moving} pods (see plan)")
    return _drain_answer(run, _drain_loop(run, node))


_ACTIONS: dict[str, Callable[[_Run, list[dict[str, Any]]], _Answer]] = {
    "plan": _plan,
    "status": _status,
    "cordon": _cordon,
    "uncordon": _uncordon,
    "drain": _drain,
    "checkpoint": _checkpoint,
    "replace": _replace,
}


# --------------------------------------------------------------------------- answer and ledger


def _result(
    request: RunbookRequest,
    deps: Deps,
    recorder: Recorder,
    node: NodeView | None,
    answer: _Answer,
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
