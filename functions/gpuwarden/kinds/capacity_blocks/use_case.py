"""Interruptible Capacity Reservations and Capacity Blocks for ML (docs/events.md).

- ``capacity-reservation-interruption`` names an instance: handled as a Spot interruption.
- ``capacity-block-expiry`` names a reservation: every node of the cluster in it (node label
  ``karpenter.k8s.aws/capacity-reservation-id``, else the instance's reservation in EC2) is
  handled as a Spot interruption, with the warning's deadline (EC2 starts terminating then).
- ``capacity-block-plan`` (the block was delivered, or the periodic reconcile found the
  cluster's nodes running in one): a one-time EventBridge Scheduler schedule — the same
  mechanism as maintenance plans — starts the drain ``capacity_blocks.lead_minutes`` before EC2
  starts terminating the block's instances (30 min before it ends), with the checkpoint
  handshake and the deadline at that start. When it fires the block is read again (a block
  can be extended): a later end moves the plan.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import CloudError, GpuwardenError
from gpuwarden.domain.notice import CAPACITY_BLOCK_TERMINATION_LEAD_SECONDS, Kind, Notice
from gpuwarden.domain.policy import section_of
from gpuwarden.domain.ports import CapacityReservation
from gpuwarden.domain.views import NodeView
from gpuwarden.kinds.capacity_blocks.policy import CapacityBlocksPolicy
from gpuwarden.services.engine.context import Deps, FanOut, Recorder
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.failures import failed_notice
from gpuwarden.services.engine.hooks import KindHooks
from gpuwarden.services.engine.result import Result, finished, merged_checkpoints, summed
from gpuwarden.services.notices import plans

DUE_ACTION = "capacity-block-due"
PLAN = Kind.CAPACITY_BLOCK_PLAN
#: A plan whose drain would start within this much of now runs now instead of being scheduled.
_NOW_SLACK = timedelta(seconds=60)
_MAX_PARALLEL = 16


def termination_start(end: datetime) -> datetime:
    """EC2 starts terminating a Capacity Block's instances 30 minutes before the block ends."""
    return end - timedelta(seconds=CAPACITY_BLOCK_TERMINATION_LEAD_SECONDS)


def drain_start(deps: Deps, end: datetime) -> datetime:
    """When the planned drain starts: ``capacity_blocks.lead_minutes`` before termination starts."""
    return termination_start(end) - timedelta(minutes=section_of(deps.policy, CapacityBlocksPolicy).lead_minutes)


# --------------------------------------------------------------------------- which nodes


def _ask_ec2(nodes: Sequence[NodeView]) -> list[str]:
    """Instances whose reservation only EC2 knows: Karpenter labels every node it launches into one,
    so only nodes outside Karpenter (managed or self-managed node groups) are looked up."""
    return [n.instance_id for n in nodes if n.nodepool is None and n.capacity_reservation_id is None and n.instance_id]


def nodes_in_reservation(deps: Deps, reservation_id: str) -> list[NodeView]:
    """The cluster's nodes in the reservation: by Karpenter's label, else by the instance in EC2."""
    nodes = deps.kube.list_nodes()
    found = [n for n in nodes if n.capacity_reservation_id == reservation_id]
    unlabeled = _ask_ec2(nodes)
    if unlabeled:
        in_ec2 = deps.cloud.reservations_of(unlabeled)
        found += [n for n in nodes if n.instance_id in unlabeled and in_ec2.get(n.instance_id) == reservation_id]
    return found


def _per_node(notice: Notice, node: NodeView) -> Notice:
    digest = hashlib.sha256(node.name.encode()).hexdigest()[:12]
    return notice.model_copy(
        update={
            "instance_id": node.instance_id,
            "node_name": node.name,
            "event_id": f"{notice.event_id[:200]}:{digest}",
        }
    )


def _guarded(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool, fan_out: FanOut | None) -> Result:
    try:
        return disrupt(notice, deps, hooks, drain_locally, fan_out=fan_out)
    except GpuwardenError as err:
        return failed_notice(notice, err)
    finally:
        if fan_out is not None and notice.node_name:  # a run that stopped early holds no one up
            fan_out.sent(notice.node_name)


def drain_nodes(notice: Notice, nodes: Sequence[NodeView], deps: Deps, hooks: KindHooks, drain_locally: bool) -> Result:
    """Every node of the reservation through the one interruption sequence, side by side."""
    where = notice.capacity_reservation_id or "?"
    if not nodes:
        reason = f"no node of cluster {deps.policy.cluster} runs in capacity reservation {where}"
        return Result(outcome="ignored", kind=notice.kind.value, event_id=notice.event_id, reason=reason)
    per_node = [_per_node(notice, node) for node in nodes]
    # one handshake per gang for the whole block: each run asks its own node's pods (FanOut)
    fan_out = FanOut(frozenset(n.name for n in nodes)) if len(nodes) > 1 else None
    results = deps.each(lambda n: _guarded(n, deps, hooks, drain_locally, fan_out), per_node, _MAX_PARALLEL)
    # each node's answer is recorded under its own id; the notice's own id gets the whole answer
    return summed(
        results,
        where=f"nodes in {where}",
        event_id=notice.event_id,
        deadline=notice.deadline,
        checkpoints=merged_checkpoints(results),  # one handshake per gang for the whole block
    )


# --------------------------------------------------------------------------- the expiration warning


def handle_block_expiry(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """Every node in the block, as a Spot interruption with the warning's deadline."""
    assert notice.capacity_reservation_id is not None  # the source model requires it
    nodes = nodes_in_reservation(deps, notice.capacity_reservation_id)
    return drain_nodes(notice, nodes, deps, hooks, drain_locally)


# --------------------------------------------------------------------------- plans


def due_tick(reservation_id: str) -> dict[str, str]:
    """The Scheduler input that runs a block's plan (the scheduled function, action ``capacity-block-due``)."""
    return plans.due_tick(DUE_ACTION, reservation_id)


def schedule_name(reservation_id: str, at: datetime) -> str:
    """Idempotent per (block, drain start): a re-delivery or a reconcile schedules nothing twice."""
    return f"capblock-{reservation_id}-{at:%Y%m%dT%H%M}"[:64]


def _plan_notice(reservation_id: str, end: datetime, now: datetime, source: str) -> Notice:
    return Notice(
        kind=PLAN,
        event_id=f"capacity-block-plan:{reservation_id}:{end:%Y%m%dT%H%M%SZ}",
        capacity_reservation_id=reservation_id,
        deadline=termination_start(end),
        event_time=now,
        source=source,
        detail_type="Capacity Block plan",
        detail={"end_date": end.isoformat()},
    )


def _block(deps: Deps, reservation_id: str) -> CapacityReservation | None:
    found = deps.cloud.capacity_reservations([reservation_id])
    return next((r for r in found if r.reservation_id == reservation_id), None)


def _schedule(recorder: Recorder, reservation_id: str, at: datetime, end: datetime) -> None:
    why = f"drain the nodes of Capacity Block {reservation_id} at {ann.rfc3339(at)} (it ends {ann.rfc3339(end)})"
    plans.schedule_plan(recorder, schedule_name(reservation_id, at), at, due_tick(reservation_id), why)


def plan_block(
    reservation_id: str, end: datetime, deps: Deps, hooks: KindHooks, drain_locally: bool, *, event_id: str, source: str
) -> Result:
    """Schedule the drain of a block's nodes, or drain now when its time has come."""
    now = deps.clock()
    start, stop = drain_start(deps, end), termination_start(end)
    if start <= now + _NOW_SLACK:
        notice = _plan_notice(reservation_id, end, now, source)
        return drain_nodes(notice, nodes_in_reservation(deps, reservation_id), deps, hooks, drain_locally)
    recorder = Recorder(deps, event_id)
    lead = section_of(deps.policy, CapacityBlocksPolicy).lead_minutes
    recorder.add(
        ActionType.CAPACITY_BLOCK_PLANNED,
        target=reservation_id,
        start=ann.rfc3339(start),
        deadline=ann.rfc3339(stop),
        reason=f"checkpoint and drain {lead} min before EC2 starts terminating the block at {ann.rfc3339(stop)}",
    )
    _schedule(recorder, reservation_id, start, end)
    if not deps.dry_run:
        deps.ledger.record(
            f"capacity-block-plan#{reservation_id}",
            {"end": ann.rfc3339(end), "drain_at": ann.rfc3339(start), "event_id": event_id},
        )
    reason = (
        f"planned: drain the nodes of Capacity Block {reservation_id} from {ann.rfc3339(start)}, "
        f"{lead} min before EC2 starts terminating its instances at {ann.rfc3339(stop)} (the block ends "
        f"{ann.rfc3339(end)})"
    )
    return Result(
        outcome=finished(deps.dry_run),
        kind=PLAN.value,
        event_id=event_id,
        deadline=stop,
        reason=reason,
        actions=recorder.actions,
    )


def handle_block_delivered(notice: Notice, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """``Capacity Block Delivered``: plan from its end date (read from EC2 when the event has none)."""
    reservation_id = notice.capacity_reservation_id
    assert reservation_id is not None  # the source model requires it
    end_text = notice.detail.get("end_date")
    end = datetime.fromisoformat(end_text) if isinstance(end_text, str) else None
    if end is None:
        block = _block(deps, reservation_id)
        end = block.end if block is not None else None
    if end is None:
        reason = f"Capacity Block {reservation_id} has no end date in the event or in EC2: nothing to plan"
        return Result(outcome="ignored", kind=PLAN.value, event_id=notice.event_id, reason=reason)
    return plan_block(reservation_id, end, deps, hooks, drain_locally, event_id=notice.event_id, source=notice.source)


def run_block_plan(reservation_id: str, deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> Result:
    """The scheduled tick: read the block again (it may have been extended), then drain or move the plan."""
    block = _block(deps, reservation_id)
    if block is None or block.end is None or block.state in ("expired", "cancelled", "failed"):
        state = block.state if block is not None else "unknown to EC2"
        reason = f"Capacity Block {reservation_id} is {state}: nothing to drain"
        return Result(outcome="ignored", kind=PLAN.value, event_id=reservation_id, reason=reason)
    event_id = f"capacity-block-plan:{reservation_id}:{block.end:%Y%m%dT%H%M%SZ}"
    return plan_block(reservation_id, block.end, deps, hooks, drain_locally, event_id=event_id, source="aws.scheduler")


def plan_blocks_in_use(deps: Deps, hooks: KindHooks, drain_locally: bool = True) -> list[Result]:
    """The reconcile: every Capacity Block the cluster's nodes run in gets its plan (a missed delivery)."""
    nodes = deps.kube.list_nodes()
    ids = {n.capacity_reservation_id for n in nodes if n.capacity_reservation_id}
    unlabeled = _ask_ec2(nodes)
    if unlabeled:
        ids |= set(deps.cloud.reservations_of(unlabeled).values())
    if not ids:
        return []
    results: list[Result] = []
    for block in deps.cloud.capacity_reservations(sorted(ids)):
        if not block.capacity_block or block.end is None or block.state not in ("active", "scheduled", "pending"):
            continue
        event_id = f"capacity-block-plan:{block.reservation_id}:{block.end:%Y%m%dT%H%M%SZ}"
        results.append(
            plan_block(
                block.reservation_id, block.end, deps, hooks, drain_locally, event_id=event_id, source="reconcile"
            )
        )
    return results


def reconcile_blocks(recorder: Recorder, hooks: KindHooks, drain_locally: bool, planned: list[Result]) -> str:
    """The reconcile's Capacity Block part, into the tick's record: what was planned, or why it could
    not look (EC2 unreachable must not stop the NodePools from being reconciled). Each plan's own
    answer is added to ``planned``, for the dispatch to record."""
    try:
        results = plan_blocks_in_use(recorder.deps, hooks, drain_locally)
    except CloudError as err:
        recorder.add(ActionType.CAPACITY_BLOCKS_UNKNOWN, reason=str(err))
        return f"; Capacity Blocks not checked: {err}"
    recorder.actions += [a for r in results for a in r.actions]
    planned += results
    return "".join(f"; {r.reason}" for r in results)
