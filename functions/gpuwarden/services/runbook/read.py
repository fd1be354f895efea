"""The runbook's read-only actions: `plan` (what a drain would do now) and `status` (what
gpuwarden knows of the node). Both run on dry-run ports."""

from __future__ import annotations

from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import acknowledged, checkpoint_spec, delivery_failed, requested_by, requested_for
from gpuwarden.domain.drain import skip_reason
from gpuwarden.domain.pdb import PdbView, blocking_pdb
from gpuwarden.domain.plan import plan_counts
from gpuwarden.domain.views import DO_NOT_DISRUPT, NodeView, PodView
from gpuwarden.domain.wording import are, count
from gpuwarden.services.engine.plan import Plan, plan_drain
from gpuwarden.services.engine.result import finished
from gpuwarden.services.runbook.run import Answer, Run, refusal

# --------------------------------------------------------------------------- plan

#: What each action that moves no pod does to the pods on the node (its plan rows are `skip`).
_STAYS = {
    "cordon": "stays: a cordon only keeps new pods off the node",
    "uncordon": "stays: uncordon only lets new pods land on the node again",
    "replace": "stays: replace only launches capacity for the node",
    "checkpoint": "stays: checkpoint only asks opted-in pods, it evicts nothing",
}


def drain_plan(run: Run) -> Plan:
    """What a drain of the node would do now, from the drain's own decisions (once per request)."""
    if run.plan is None:
        run.plan = plan_drain(
            run.recorder, run.pods, run.pdbs, involuntary=False, deadline=None, notice_time=run.notice.event_time
        )
    return run.plan


def plan_steps(run: Run, plan: Plan | None = None) -> list[dict[str, Any]]:
    """Every pod on the node with what *this action* would do to it: a drain's plan for `plan`,
    `status` (what a drain would do now) and `drain`; `checkpoint` asks what a drain would ask and
    evicts nothing; `cordon`, `uncordon` and `replace` leave every pod where it is."""
    action = run.request.action
    plan = plan or drain_plan(run)
    if action in ("plan", "status", "drain"):
        return plan.as_rows()
    rows = []
    for row in plan.rows:
        pod = next(p for p in run.pods if p.key == row.pod)
        kept = skip_reason(pod)
        if kept is not None:
            rows.append({"pod": row.pod, "step": "skip", "reason": kept})
        elif action == "checkpoint" and row.asks:
            rows.append({"pod": row.pod, "step": "signal", "reason": "asked to checkpoint; it is not evicted"})
        else:
            rows.append({"pod": row.pod, "step": "skip", "reason": _STAYS[action]})
    return rows


#: How many of the pods a gang asks on other nodes a plan's reason names (the rest are counted).
NAMED = 8


def plan_answer(run: Run, plan: list[dict[str, Any]]) -> Answer:
    drain = drain_plan(run)
    counts = plan_counts(drain.rows)
    here = {r.pod for r in drain.rows if r.asks}
    asks = len(drain.asks)
    others = [pod for pod in drain.asks if pod not in here]
    shown = ", ".join(others[:NAMED]) + (f" and {len(others) - NAMED} more" if len(others) > NAMED else "")
    elsewhere = f" ({len(others)} of them on other nodes, with their gangs: {shown})" if others else ""
    reason = (
        f"a drain of {run.node.name} now would ask {count(asks, 'pod')} to checkpoint{elsewhere}, "
        f"evict {counts['evict'] + counts['signal']} and leave {counts['skip']}"
    )
    if counts["blocked"]:
        reason += f"; {are(counts['blocked'])} blocked by a PDB that allows no (more) disruption now"
    refused = refusal(run)
    if refused:
        reason += f"; a drain now would be refused: {refused}"
    return Answer(finished(run.request.dry_run), reason)


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
    held = f"held for {notes.get(ann.KIND)} ({event_id})" if event_id else replacement_hold(node)
    cordon = "cordoned" if node.unschedulable else "schedulable"
    if node.unschedulable and not status["cordoned_by_gpuwarden"]:
        cordon += " (not by gpuwarden)"
    reason = (
        f"{node.name}: {held}, {cordon}; {len(status['waiting_for_checkpoint'])} pods waiting on a checkpoint, "
        f"{len(status['blocked_by_pdb'])} blocked by a PDB"
    )
    return Answer(finished(run.request.dry_run), reason, status=status)


def replacement_hold(node: NodeView) -> str:
    """What gpuwarden holds on a node it holds for no event: a replacement it launched (Karpenter's
    registration copies the NodeClaim's annotations onto its node: docs/cluster.md, "Replacement
    capacity") is held with do-not-disrupt until its pods arrive or its hold time passes."""
    notes = node.annotations
    if notes.get(ann.REPLACES) is None and notes.get(ann.LAUNCHED_FOR) is None:
        return "not held by gpuwarden"
    what = f"gpuwarden's replacement for {notes.get(ann.REPLACES) or '?'} (launched for {notes.get(ann.LAUNCHED_FOR)})"
    if notes.get(DO_NOT_DISRUPT) == "true" and notes.get(ann.HOLD_UNTIL):
        return f"{what}, held with {DO_NOT_DISRUPT} until {notes[ann.HOLD_UNTIL]} or until its pods run there"
    return f"{what}, its hold taken back"
