"""``karpenter-expiry`` (docs/cluster.md, "Expiry"; docs/events.md): the periodic reconcile reads every
Karpenter node's NodeClaim, finds when Karpenter expires it (``domain.expiry``) and plans its drain
as a Capacity Block's end is planned: a one-time ``karpenter-expiry-due`` tick at the latest allowed
window before ``expiry - karpenter_expiry.lead_minutes``, else at that time. A node whose planned
time has come is drained at once, checkpoints first, a replacement as for a Spot warning.

Before ``expiry - lead`` the drain is voluntary: the windows and the NodePool's budgets are asked
(`node_ops.voluntary_verdict_of`), and a refusal moves the plan to ``expiry - lead``. From then on
nothing holds it: Karpenter's own expiry is forceful.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.expiry import Expiry, ExpiryPlan, expiry_of, plan_expiry
from gpuwarden.domain.nodepools import claim_of, nodeclaim_from_json
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.policy import section_of
from gpuwarden.domain.protections import FORCED_AT
from gpuwarden.domain.views import NodeView
from gpuwarden.domain.wording import count
from gpuwarden.kinds.karpenter_expiry.policy import KarpenterExpiryPolicy
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.hooks import KindHooks
from gpuwarden.services.engine.node_ops import voluntary_verdict_of
from gpuwarden.services.engine.result import Result, finished
from gpuwarden.services.notices import plans

KIND = Kind.KARPENTER_EXPIRY
DUE_ACTION = "karpenter-expiry-due"


def due_tick(node: str) -> dict[str, str]:
    """The Scheduler input that runs a node's expiry plan (the scheduled function, ``karpenter-expiry-due``)."""
    return plans.due_tick(DUE_ACTION, node)


def schedule_name(node: str, at: datetime) -> str:
    """Idempotent per (node, drain start): a later reconcile schedules nothing twice."""
    return f"kexpiry-{node.split('.')[0]}-{at:%Y%m%dT%H%M}"[:64]


def expiries(deps: Deps) -> Iterator[tuple[NodeView, Expiry]]:
    """Every Karpenter node whose NodeClaim expires (one LIST of nodes, one of NodeClaims)."""
    claims = [nodeclaim_from_json(c) for c in deps.kube.list_nodeclaims()]
    for node in deps.kube.list_nodes():
        claim = claim_of(node, claims) if node.nodepool else None
        found = expiry_of(claim) if claim is not None else None
        if found is not None and found.at is not None:
            yield node, found


def plan_of(deps: Deps, node: NodeView, at: datetime) -> ExpiryPlan:
    lead = timedelta(minutes=section_of(deps.policy, KarpenterExpiryPolicy).lead_minutes)
    return plan_expiry(at, lead, deps.policy.windows, deps.window_clock(), node.nodepool, plans.drain_estimate(deps))


def _notice(node: NodeView, expiry: Expiry, now: datetime, source: str) -> Notice:
    assert expiry.at is not None
    return Notice(
        kind=KIND,
        event_id=f"karpenter-expiry:{expiry.claim}:{expiry.at:%Y%m%dT%H%M%SZ}",
        instance_id=node.instance_id,
        node_name=node.name,
        deadline=expiry.at,
        event_time=now,
        source=source,
        detail_type="Karpenter expiry plan",
        detail={"nodeclaim": expiry.claim, "expires": ann.rfc3339(expiry.at)}
        | ({FORCED_AT: ann.rfc3339(forced)} if (forced := expiry.karpenter_forces_at) is not None else {}),
    )


def plan_node(
    deps: Deps, node: NodeView, expiry: Expiry, hooks: KindHooks, drain_locally: bool, source: str
) -> Result | None:
    """Drain ``node`` now when its planned time has come (asking the windows and budgets while that
    is before ``expiry - lead``), else schedule its plan. None: planned already (the ledger names
    the same start), nothing new to say."""
    plan = plan_of(deps, node, expiry.at or deps.clock())
    notice = _notice(node, expiry, deps.clock(), source)
    recorder = Recorder(deps, notice.event_id)
    at = plan.drain_at
    if plan.due and plan.voluntary:
        verdict = voluntary_verdict_of(deps, node, lambda: deps.kube.list_pods_on_node(node.name), KIND)
        if verdict.refused is None:
            return disrupt(notice, deps, hooks, drain_locally, node=node, recorder=recorder, why=plan.reason)
        recorder.add(ActionType.REFUSED, node, reason=verdict.refused)
        at = plan.latest
    elif plan.due:
        return disrupt(notice, deps, hooks, drain_locally, node=node, recorder=recorder, why=plan.reason)
    key = f"karpenter-expiry#{expiry.claim}"
    seen = deps.ledger.get(key)
    if seen is not None and seen.get("drain_at") == ann.rfc3339(at) and source == "reconcile":
        return None
    why = plan.reason if at == plan.drain_at else f"refused now; drain at {ann.rfc3339(at)}, {plan.reason}"
    recorder.add(
        ActionType.EXPIRY_PLANNED, node, node_name=node.name, target=expiry.claim, start=ann.rfc3339(at), reason=why
    )
    why_tick = f"karpenter-expiry-due tick for {node.name} ({expiry.reason})"
    plans.schedule_plan(recorder, schedule_name(node.name, at), at, due_tick(node.name), why_tick)
    recorder.flush()
    if not deps.dry_run:
        deps.ledger.record(key, {"drain_at": ann.rfc3339(at), "expires": ann.rfc3339(plan.expiry)})
    return Result(
        outcome=finished(deps.dry_run),
        kind=KIND.value,
        event_id=notice.event_id,
        node=node.name,
        deadline=plan.expiry,
        reason=f"planned: {why}",
        actions=recorder.actions,
    )


def run_expiry_plan(node_name: str, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """The scheduled tick: read the node's NodeClaim again (its expiry may have moved), then drain
    or plan again."""
    found = next(((n, e) for n, e in expiries(deps) if n.name == node_name), None)
    if found is None:
        reason = f"node {node_name} is gone, or its NodeClaim no longer expires: nothing to drain"
        return Result(outcome="ignored", kind=KIND.value, event_id=f"karpenter-expiry:{node_name}", reason=reason)
    answer = plan_node(deps, found[0], found[1], hooks, drain_locally, "aws.scheduler")
    assert answer is not None  # only the reconcile stays silent
    return answer


def reconcile_expiries(recorder: Recorder, hooks: KindHooks, drain_locally: bool, planned: list[Result]) -> str:
    """The reconcile's part: every Karpenter node's expiry planned (or drained, its time come). Each
    new plan's answer goes into ``planned``; those planned already are only counted."""
    results, known = [], 0
    for node, expiry in expiries(recorder.deps):
        if node.annotations.get(ann.EVENT_ID):
            continue  # gpuwarden is already taking this node out
        answer = plan_node(recorder.deps, node, expiry, hooks, drain_locally, "reconcile")
        if answer is None:
            known += 1
        else:
            results.append(answer)
    recorder.actions += [a for r in results for a in r.actions]
    planned += results
    if not results and not known:
        return ""
    return (
        f"; Karpenter expiry: {count(len(results), 'node')} planned or drained now, {known} planned before"
        + "".join(f"; {r.reason}" for r in results)
    )
