"""The runbook's read-only actions: `plan` (what a drain would do now) and `status` (what
gpuwarden knows of the node). Both run on dry-run ports."""

from __future__ import annotations

from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import acknowledged, checkpoint_spec, delivery_failed, requested_by, requested_for
from gpuwarden.domain.drain import DrainContext, PodStep, decide_round
from gpuwarden.domain.pdb import PdbView, blocking_pdb
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.runbook.run import Answer, Run, refusal

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


def plan_steps(run: Run) -> list[dict[str, Any]]:
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


def plan_answer(run: Run, plan: list[dict[str, Any]]) -> Answer:
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
    return Answer("dry-run" if run.request.dry_run else "handled", reason)


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


def status_answer(run: Run, plan: list[dict[str, Any]]) -> Answer:
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
    return Answer("dry-run" if run.request.dry_run else "handled", reason, status=status)
