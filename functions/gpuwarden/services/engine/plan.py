"""The one plan of a drain (docs/cli.md#plans): `runbook plan`, `runbook drain --dry-run`, a kind's dry
run and observe mode read it, and the drain itself decides with the same `decide_round`.

Only reads: the node's gangs (one LIST each, as a drain round lists them) and the PDBs of its pods'
namespaces. A gang's pods are counted as a notice asks them: every opted-in pod of the gang, on
every node (or only its leader), however many of them are on this node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.drain import DrainContext
from gpuwarden.domain.gang_progress import GangHold, holds, progress
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.pdb import PdbView, pdb_from_json
from gpuwarden.domain.plan import PlanRow, plan_round
from gpuwarden.domain.protections import forced_at_of
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.gangs import find_gangs


@dataclass(frozen=True)
class Plan:
    rows: list[PlanRow]
    #: gang key → the pods the drain would ask for it (on this node and elsewhere)
    gangs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def asks(self) -> list[str]:
        """Every pod the drain would ask to checkpoint: the node's own (a signal row), and every
        pod its gangs ask."""
        asked = {p for pods in self.gangs.values() for p in pods}
        asked |= {r.pod for r in self.rows if r.asks}
        return sorted(asked)

    def as_rows(self) -> list[dict[str, object]]:
        return [r.as_dict() for r in self.rows]


def namespace_pdbs(deps: Deps, pods: list[PodView]) -> list[PdbView]:
    """The PDBs of the namespaces the drain would evict from."""
    namespaces = sorted({p.namespace for p in pods if not p.is_daemonset and not p.is_mirror and not p.finished})
    return [pdb_from_json(obj) for namespace in namespaces for obj in deps.kube.list_pdbs(namespace)]


def plan_drain(
    recorder: Recorder,
    pods: list[PodView],
    pdbs: list[PdbView],
    *,
    involuntary: bool,
    deadline: datetime | None,
    notice_time: datetime | None,
    kind: Kind | None = None,
    forced_at: datetime | None = None,
) -> Plan:
    """What a drain of the node (``pods``) under ``recorder.event_id`` would do now."""
    deps = recorder.deps
    policy = deps.policy.checkpoint
    now = deps.clock()
    gang_holds: dict[str, GangHold] = {}
    asked: dict[str, list[str]] = {}
    for gang in find_gangs(recorder, pods):
        state = progress(
            gang, recorder.event_id, now, deadline, policy.default_timeout_seconds, policy.allow_exec, notice_time
        )
        gang_holds |= holds(gang, state, pods)
        if state.unasked:
            asked[gang.key] = sorted(state.unasked)
    ctx = DrainContext(
        event_id=recorder.event_id,
        involuntary=involuntary,
        deadline=deadline,
        now=now,
        default_checkpoint_timeout=policy.default_timeout_seconds,
        allow_exec=policy.allow_exec,
        notice_time=notice_time,
        gangs=gang_holds,
        kind=kind,
        forced_at=forced_at,
    )
    rows = plan_round(pods, ctx, pdbs)
    in_gang = {p: g for g, members in asked.items() for p in members}
    rows = [
        replace(r, reason=f"{r.reason}, with gang {g} ({len(asked[g])} pods asked)")
        if r.asks and (g := in_gang.get(r.pod)) is not None
        else r
        for r in rows
    ]
    return Plan(rows, asked)


def notice_plan(recorder: Recorder, notice: Notice, pods: list[PodView]) -> Plan:
    """`plan_drain` for a notice (a kind's, or the runbook's `manual` one)."""
    deps = recorder.deps
    return plan_drain(
        recorder,
        pods,
        namespace_pdbs(deps, pods),
        involuntary=not deps.is_voluntary(notice.kind),
        deadline=notice.deadline,
        notice_time=notice.event_time,
        kind=notice.kind,
        forced_at=forced_at_of(notice),
    )


def record_would_drain(recorder: Recorder, node: NodeView, plan: Plan) -> None:
    """A dry run (and observe mode) records the drain's evictions as the plan has them: each pod
    that goes now, each that goes once it has checkpointed, each a PDB blocks, each deleted."""
    for row in plan.rows:
        if row.step == "evict":
            recorder.add(ActionType.EVICT, node, pod=row.pod, reason=row.reason, grace_seconds=row.grace_seconds)
        elif row.step == "signal":
            why = "once it acknowledges its checkpoint, or its timeout passes"
            recorder.add(ActionType.EVICT, node, pod=row.pod, reason=why, grace_seconds=row.grace_seconds)
        elif row.step == "delete":
            recorder.add(ActionType.DELETE, node, pod=row.pod, reason=row.reason, grace_seconds=row.grace_seconds)
        elif row.step == "blocked":
            recorder.add(ActionType.EVICTION_BLOCKED, pod=row.pod, reason=row.reason)
    recorder.flush()
