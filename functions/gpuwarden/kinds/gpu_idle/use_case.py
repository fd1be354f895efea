"""GPU-idle reclaim (docs/events.md `gpu-idle`): guardrails, then cordon → checkpoint → drain → retire.

Guardrails, in order (each skip: an `ignored` result, a log line and, once the node is
known, a `DisruptionRefused` Event on it): the alarm is in ALARM; the node is ours and has
accelerators; an Alertmanager notification's alerts cover every one of them; nothing else
holds it; no `karpenter.sh/do-not-disrupt` on it or its pods; the cap on nodes reclaiming at
once has room; its pool keeps `min_nodes_per_nodepool` schedulable
nodes; a budget window allows a voluntary disruption; and CloudWatch still shows it idle
(no data is not idleness: skip).

The cap (`gpu_idle.max_nodes_per_evaluation`) is taken with the node write itself: the
RV-checked mark carries a claim timestamp, then every racer re-lists the holders, sorts them
by (claim time, node name) and keeps its slot only among the first `cap`; the others release
(uncordon, clear the annotations). Racers all sort the same list the same way, so a burst of
contributor events settles on `cap` nodes without a lock. The check runs again just before the
first pod is touched, which closes the window of a racer whose write landed late.
"""

from __future__ import annotations

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.accelerators import is_neuron_node, node_accelerator_count
from gpuwarden.domain.actions import ActionType, DrainOutcome
from gpuwarden.domain.alerts import coverage_refusal
from gpuwarden.domain.errors import NotFound
from gpuwarden.domain.gpu_idle import (
    CLAIMED_AT,
    IdleMetric,
    Utilization,
    busy_refusal,
    cap_precheck,
    cap_refusal,
    claim_stamp,
    gpu_idle_holders,
    gpu_refusal,
    held_elsewhere,
    min_nodes_refusal,
    nodeclaim_for,
    state_refusal,
)
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.policy import section_of
from gpuwarden.domain.protections import do_not_disrupt_refusal
from gpuwarden.domain.views import NodeView
from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from gpuwarden.kinds.gpu_idle.reschedule import comes_back_refusal
from gpuwarden.observability import logger
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.hooks import Disruption, KindHooks, Marked, Ran, Stop
from gpuwarden.services.engine.node_ops import give_back, voluntary_verdict_of
from gpuwarden.services.engine.result import Outcome, Result, finished, notice_result


def handle_gpu_idle(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """An alarm in ALARM through the one sequence (the guardrails are the kind's guard); any other
    state is ignored before the node is looked up."""
    refused = state_refusal(notice.detail.get("state"))
    if refused is not None:
        return skipped(Stop(notice, Recorder(deps, notice.event_id), None, refused, ""))
    return disrupt(notice, deps, hooks, drain_locally)


# ------------------------------------------------------------------ guardrails


def guardrails(d: Disruption) -> str | None:
    """The guard: every guardrail of the module's docstring, a window's refusal first."""
    deps, node = d.deps, d.node
    # per-GPU alerts: one notification's alerts must cover every accelerator (docs/gpu-signals.md)
    refused = gpu_refusal(node) or coverage_refusal(d.notice, node_accelerator_count(node))
    refused = refused or held_elsewhere(node, d.notice.event_id)
    if refused is not None or node.annotations.get(ann.EVENT_ID) == d.notice.event_id:
        return refused  # a resumed reclaim was let through once already
    policy = section_of(deps.policy, GpuIdlePolicy)
    # A window's refusal comes first, then the NodePool's budgets (Empty or Underutilized): the
    # first is the reason given, whatever else would also refuse.
    refused = voluntary_verdict_of(deps, node, lambda: d.pods, d.notice.kind).refused
    refused = refused or do_not_disrupt_refusal(d.notice.kind, node, d.pods)
    if refused is not None:
        return refused
    nodes = deps.kube.list_nodes()
    refused = cap_precheck(node.name, gpu_idle_holders(nodes), policy.max_nodes_per_evaluation)
    refused = refused or min_nodes_refusal(node, nodes, policy.min_nodes_per_nodepool)
    if refused is not None:
        return refused
    if d.notice.detail.get("evidence") == "alert":
        return None  # an Alertmanager alert is its own evidence: no CloudWatch re-check (docs/gpu-signals.md)
    # the node's instance, else the one the alarm's series names (a node without an AWS providerID:
    # a KWOK node on the real plane, docs/realplane.md; a wrong pairing finds no data and skips)
    instance_id = node.instance_id or d.notice.instance_id
    if instance_id is None:
        return (
            f"node {node.name} has no AWS providerID and the alarm names no instance: "
            "its GPU utilization cannot be re-checked"
        )
    metric = IdleMetric.for_alarm(
        d.notice.detail.get("metric"), deps.policy.cluster, instance_id, node.name, neuron=is_neuron_node(node)
    )
    values = deps.cloud.gpu_utilization(metric, policy.evaluation_minutes, policy.period_seconds)
    refused = busy_refusal(Utilization(tuple(values), policy.evaluation_minutes, metric.name), policy.threshold_percent)
    return refused or comes_back_refusal(d, nodes)  # idle, but would its pods come straight back?


def claim_time(d: Disruption) -> dict[str, str]:
    """The mark carries the slot's claim time: racers order themselves by it (see the module doc)."""
    return {CLAIMED_AT: d.node.annotations.get(CLAIMED_AT) or claim_stamp(d.deps.clock())}


def within_cap(d: Disruption) -> str | None:
    """After the mark: the cap on nodes reclaiming at once, with this node's slot in it."""
    return _over_cap(d.deps, d.node)


def _over_cap(deps: Deps, held: NodeView) -> str | None:
    nodes = [n for n in deps.kube.list_nodes() if n.name != held.name] + [held]
    return cap_refusal(
        held.name, gpu_idle_holders(nodes), section_of(deps.policy, GpuIdlePolicy).max_nodes_per_evaluation
    )


# ------------------------------------------------------------------ settling a round


def settle_round(recorder: Recorder, state: DrainState) -> DrainState:
    """After each `round_of` of a gpu-idle drain (locally, or in the deployed drain loop):
    retire the node once drained; give it back when the drain cannot finish in time."""
    deps = recorder.deps
    taken = _taken_over(deps, state)
    if taken is not None:  # an involuntary notice superseded this reclaim: neither retire nor release
        recorder.add(ActionType.SUPERSEDED, reason=taken)
        return state.model_copy(update={"done": True, "outcome": DrainOutcome.SUPERSEDED})
    limit = section_of(deps.policy, GpuIdlePolicy).drain_limit_seconds
    if state.done:
        if state.outcome.drained:
            _retire(recorder, state.node)
        elif state.outcome is DrainOutcome.BLOCKED:
            give_back(recorder, state.node, state.event_id, f"drain blocked: {'; '.join(state.blocked[:5])}")
        return state
    if (deps.clock() - state.started_at).total_seconds() <= limit:
        return state
    node = deps.kube.get_node(state.node)
    reason = f"not drained after gpu_idle.drain_limit_seconds {limit}: " + "; ".join(
        (state.blocked or state.waiting)[:5]
    )
    recorder.add(ActionType.DRAIN_BLOCKED, node, reason=reason)
    recorder.flush()
    give_back(recorder, state.node, state.event_id, reason)
    return state.model_copy(update={"done": True, "outcome": DrainOutcome.BLOCKED})


def _taken_over(deps: Deps, state: DrainState) -> str | None:
    node = deps.kube.get_node(state.node)
    holder = node.annotations.get(ann.EVENT_ID) if node is not None else state.event_id
    if holder == state.event_id:
        return None
    kind = node.annotations.get(ann.KIND) if node is not None else None
    return f"node {state.node} was taken over by {kind} ({holder}): the gpu-idle reclaim stops"


def _retire(recorder: Recorder, node_name: str) -> None:
    """Delete the node's NodeClaim, else terminate it in its Auto Scaling group, else say so."""
    deps = recorder.deps
    node = deps.kube.get_node(node_name)
    if node is None:
        recorder.add(ActionType.RETIRE, reason=f"node {node_name} is gone already")
        return
    try:
        claims = deps.kube.list_nodeclaims()
    except NotFound:  # no Karpenter CRDs in this cluster
        claims = []
    claim = nodeclaim_for(node, claims)
    if claim is not None:
        if not claim.deleting:
            deps.kube.delete_nodeclaim(claim.name)
        reason = "NodeClaim deleted: Karpenter terminates the instance"
        recorder.add(ActionType.RETIRE, node, target=f"nodeclaim/{claim.name}", reason=reason)
    else:
        group = deps.cloud.asg_of(node.instance_id) if node.instance_id else None
        if group is not None and node.instance_id is not None:
            deps.cloud.terminate_in_asg(node.instance_id)
            reason = "terminated in its Auto Scaling group, desired capacity decremented"
            recorder.add(ActionType.RETIRE, node, target=f"asg/{group}", instance_id=node.instance_id, reason=reason)
        else:
            reason = "neither a Karpenter NodeClaim's node nor an Auto Scaling group member: left cordoned and drained"
            recorder.add(ActionType.RETIRE_SKIPPED, node, reason=reason)
    recorder.flush()


# ------------------------------------------------------------------ results


def skipped(stop: Stop) -> Result:
    """The kind's answer to a stop: a guardrail's refusal (or another notice's hold) is recorded on
    the node as `refused`, with its Event; an alarm for no node of the cluster is logged."""
    notice, recorder, node = stop.notice, stop.recorder, stop.node
    if node is not None:
        recorder.add(ActionType.REFUSED, node, reason=stop.reason)
        recorder.flush()
    else:
        logger.info("gpu-idle ignored", extra={"event_id": notice.event_id, "reason": stop.reason})
    return notice_result(notice, recorder, node, outcome="ignored", reason=stop.reason)


def reclaimed(d: Disruption, marked: Marked, ran: Ran, why: str) -> Result:
    """The kind's answer once it ran: what the drain (and the retirement) came to."""
    notice, recorder, node, deps, resumed, state = d.notice, d.recorder, d.node, d.deps, marked.resumed, ran.state
    checkpoints = ran.looks.as_result()
    outcome: Outcome = finished(deps.dry_run, "duplicate" if resumed else "handled")
    if state is None:
        reason = f"gpu idle: would reclaim node {node.name}"
    elif state.outcome is DrainOutcome.SUPERSEDED:
        taken = next(a for a in reversed(recorder.actions) if a["type"] is ActionType.SUPERSEDED)
        return notice_result(notice, recorder, node, outcome="ignored", reason=taken["reason"], checkpoints=checkpoints)
    elif state.outcome is DrainOutcome.BLOCKED:
        reason = f"gpu idle: drain of {node.name} blocked, node uncordoned: " + "; ".join(state.blocked[:3])
    elif state.done:
        retired = next((a for a in recorder.actions if a["type"] in (ActionType.RETIRE, ActionType.RETIRE_SKIPPED)), {})
        reason = f"gpu idle: node {node.name} drained; {retired.get('target') or retired.get('reason', '')}".rstrip()
    else:
        reason = f"gpu idle: node {node.name} cordoned, drain continues in the drain workflow"
    if resumed and not deps.dry_run:
        reason = f"event {notice.event_id} was already applied to {node.name}; resumed: {reason}"
    drain = state.model_dump(mode="json") if state else None
    return notice_result(notice, recorder, node, outcome=outcome, reason=reason, drain=drain, checkpoints=checkpoints)
