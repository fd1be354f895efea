"""The dispatch: every input gpuwarden takes, to the kind that runs it (docs/architecture.md).

- a notice → its kind's use case (`KindSpec.handle`) with its kind's hooks, unless its switch is off;
- a Scheduler tick → the kind whose tick action it is; the periodic reconcile also runs every
  kind's reconcile part; a GPU-health scan → every kind's scan part; an Alertmanager notification
  → its alerts' notices;
- a drain-workflow round → settled by its kind's hooks; a runbook request → the manual kind.

Every kind comes from the one registry (`gpuwarden.kinds.registry`). The handlers and the command
line's local runner enter through `handle` (any parsed input), the drain workflow's rounds through
`drain_round`; nothing below imports it. Every answer leaves
through `result.answered` (the ledger entry and the metric), a failure through `result.failed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpuwarden.domain.alerts import UNMAPPED_KIND, alert_plan
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Notice, other_cluster
from gpuwarden.domain.switches import is_on, off_reason
from gpuwarden.kinds.inputs import Parsed
from gpuwarden.kinds.registry import KIND_OF, RUNBOOK, SCAN_KIND, SPECS, UNROUTED, spec_of, tick_spec, tick_switch
from gpuwarden.kinds.spec import TickCall
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.failures import failed_notice, failed_result
from gpuwarden.services.engine.node_ops import scanned_nodes
from gpuwarden.services.engine.pipeline import round_of
from gpuwarden.services.engine.result import Result, alerts_answer, answered, failed, summed, summed_outcome
from gpuwarden.services.release import release
from gpuwarden.services.runbook import actions as runbook
from gpuwarden.services.runbook.run import Progress
from gpuwarden.services.windows import windows
from gpuwarden.sources import SCAN_MARKER, AlertBatch, NoticeBatch, RunbookRequest, ScanTick, SchedulerTick

# --------------------------------------------------------------------------- the one entry


def handle(parsed: Parsed, deps: Deps, *, drain_locally: bool = True, progress: Progress | None = None) -> Result:
    """Any input, as `kinds.inputs` parses it, to what runs it: the one entry of the deployed
    handlers and of the command line's runner (``drain_locally``: the drain runs here to its end;
    ``progress``: a runbook drain's rounds, for a terminal)."""
    if isinstance(parsed, NoticeBatch):
        return handle_batch(parsed, deps, drain_locally=drain_locally)
    if isinstance(parsed, SchedulerTick):
        return handle_tick(parsed, deps, drain_locally=drain_locally)
    if isinstance(parsed, ScanTick):
        return handle_scan(parsed, deps, drain_locally=drain_locally)
    if isinstance(parsed, AlertBatch):
        return handle_alerts(parsed, deps, drain_locally=drain_locally)
    return handle_runbook(parsed, deps, drain_locally=drain_locally, progress=progress)


# --------------------------------------------------------------------------- notices


def _one(notice: Notice, deps: Deps, drain_locally: bool) -> Result:
    """One notice's answer, recorded; a failure (cluster, credentials, endpoint, retries) is the
    failed answer."""
    spec = spec_of(notice.kind)
    if spec.handle is None:
        reason = f"the {notice.kind.value} notices are not handled by this version"
        return Result(outcome="failed", kind=notice.kind.value, event_id=notice.event_id, reason=reason)
    # switched off by name in the policy (docs/policy.md#switches), or another cluster's event
    # (checked before any node is looked up: a node name is no proof, docs/events.md)
    off = off_reason(deps.policy, spec.switch) or other_cluster(notice, deps.policy.cluster)
    if off is not None:
        ignored = Result(
            outcome="ignored",
            kind=notice.kind.value,
            event_id=notice.event_id,
            node=None if notice.cluster not in (None, deps.policy.cluster) else notice.node_name,
            instance_id=notice.instance_id,
            reason=off,
        )
        return answered(ignored, deps)
    try:
        return answered(spec.handle(notice, deps, spec.hooks, drain_locally), deps)
    except GpuwardenError as err:
        return failed(failed_notice(notice, err), deps)


def handle_batch(batch: NoticeBatch, deps: Deps, *, drain_locally: bool = True) -> Result:
    """Every notice of one event through its kind; several notices make one summed answer."""
    kind = batch.kind.value
    if batch.ignored is not None or not batch.notices:
        reason = batch.ignored or "the event names no instance"
        return answered(Result(outcome="ignored", kind=kind, event_id=batch.event_id, reason=reason), deps)
    return summed([_one(n, deps, drain_locally) for n in batch.notices])


# --------------------------------------------------------------------------- GPU signals


def handle_scan(tick: ScanTick | None, deps: Deps, *, drain_locally: bool = True) -> Result:
    """One GPU-health scan (the every-minute schedule, or `gpuwarden scan`): every kind's scan part.
    A scan that cannot list the nodes (cluster, credentials, retries) is the failed answer."""
    scanners = [spec for spec in SPECS if spec.scan is not None]
    try:
        nodes = scanned_nodes(deps)  # the scan reads the cluster's nodes once, for every kind's part
        scanned = [spec.scan(deps, spec.hooks, drain_locally, nodes) for spec in scanners if spec.scan is not None]
    except GpuwardenError as err:
        scan_id = tick.execution_id if tick is not None else None
        return failed(failed_result(SCAN_KIND.value, err, event_id=scan_id), deps)
    # one flat list of per-node answers, each with its own kind (docs/cli.md#scan); a later kind's
    # part that found nothing adds nothing to the reason
    flat = [one for part in scanned for one in part.results or ()]
    reason = "; ".join(part.reason for i, part in enumerate(scanned) if i == 0 or part.results)
    return answered(
        Result(
            outcome=summed_outcome(flat),
            kind=SCAN_KIND.value,
            reason=reason,
            actions=[a for one in flat for a in one.actions],
            results=flat,
        ),
        deps,
    )


def handle_alerts(batch: AlertBatch, deps: Deps, *, drain_locally: bool = True) -> Result:
    """An Alertmanager notification: every firing alert the policy maps is one notice, through its
    kind; the others are ignored with the reason (docs/gpu-signals.md)."""
    plan = alert_plan(batch.alerts, deps.policy, batch.published)  # raises InvalidEvent before anything is written
    results = [
        _one(item, deps, drain_locally)
        if isinstance(item, Notice)
        else Result(outcome="ignored", kind=item[0], reason=item[1], event_id=batch.message_id)
        for item in plan
    ]
    acted = [r for item, r in zip(plan, results, strict=True) if isinstance(item, Notice)]
    return alerts_answer(results, acted, deps, message_id=batch.message_id, lost=batch.lost)


# --------------------------------------------------------------------------- Scheduler ticks


def tick_kind(tick: SchedulerTick) -> str:
    """The contract kind a Scheduler tick reports as: the kind whose tick it is."""
    return tick_spec(tick.action).kind.value


def handle_tick(tick: SchedulerTick, deps: Deps, *, drain_locally: bool = True) -> Result:
    """One Scheduler tick, run by its kind: a maintenance or Capacity Block plan falling due runs
    it; open / close / reconcile keep the NodePools in step, and the reconcile also runs every
    switched-on kind's reconcile part (the Capacity Blocks in use are planned). A switched-off
    behaviour's tick is ignored; with the NodePool windows off, the reconcile sees no window (so it
    writes back whatever a window had changed)."""
    off = off_reason(deps.policy, tick_switch(tick.action))
    if off is not None:
        return answered(Result(outcome="ignored", kind=tick_kind(tick), event_id=tick.execution_id, reason=off), deps)
    if not is_on(deps.policy, "nodepool_windows.enabled"):
        deps = replace(deps, policy=deps.policy.model_copy(update={"windows": []}))
    spec = tick_spec(tick.action)
    planned: list[Result] = []  # the reconcile parts' own answers (a Capacity Block's plan)
    also = _reconcile_parts(deps, drain_locally, planned) if tick.action == "reconcile" else None
    try:
        result = spec.ticks[tick.action].run(TickCall(tick, deps, spec.hooks, drain_locally, also))
    except GpuwardenError as err:
        return failed(failed_result(tick_kind(tick), err, event_id=tick.plan_id or tick.execution_id), deps)
    for plan in planned:
        answered(plan, deps, count=False)
    return answered(result, deps)


def _reconcile_parts(deps: Deps, drain_locally: bool, planned: list[Result]) -> Callable[[Recorder], str]:
    """Every switched-on kind's reconcile part, into the tick's record, one after the other."""

    def parts(recorder: Recorder) -> str:
        return "".join(
            spec.reconcile(recorder, spec.hooks, drain_locally, planned)
            for spec in SPECS
            if spec.reconcile is not None and off_reason(deps.policy, spec.switch) is None
        )

    return parts


# --------------------------------------------------------------------------- the runbook


def handle_runbook(
    request: RunbookRequest, deps: Deps, *, drain_locally: bool = True, progress: Progress | None = None
) -> Result:
    """One runbook action, with the hooks of the kind routed to the runbook (its caller records and
    counts it)."""
    return runbook.run_runbook(request, deps, RUNBOOK.hooks, drain_locally=drain_locally, progress=progress)


# --------------------------------------------------------------------------- the way back


def handle_release(deps: Deps, node: str | None) -> Result:
    """`gpuwarden release`: gpuwarden's marks taken back on one node, or on every node and then
    every NodePool the windows changed (docs/rollback.md)."""
    event_id = f"release-{node or 'all'}-{deps.clock():%Y%m%dT%H%M%S%fZ}"
    also = windows.restore_nodepools if node is None else None
    try:
        result = release.release(deps, node, event_id=event_id, also=also)
    except GpuwardenError as err:
        return failed(failed_result(UNROUTED["operator"].value, err, event_id=event_id, node=node), deps)
    return answered(result, deps)


# --------------------------------------------------------------------------- the drain workflow


def drain_round(recorder: Recorder, state: DrainState) -> DrainState:
    """One round of the drain workflow, settled by its kind's hooks."""
    return round_of(recorder, state, spec_of(state.kind).hooks).state


# --------------------------------------------------------------------------- before routing


def fallback_kind(raw: object) -> str:
    """The contract kind of an input whose handling failed before it was routed."""
    if isinstance(raw, dict):
        tag = raw.get("detail-type", raw.get("detail_type"))
        if isinstance(tag, str) and tag in KIND_OF:
            return KIND_OF[tag].value
        if raw.get("gpuwarden") == SCAN_MARKER:
            return SCAN_KIND.value
        if "Records" in raw:  # an Alertmanager notification
            return UNMAPPED_KIND.value
        if "gpuwarden" in raw:
            return UNROUTED["scheduler"].value
    return UNROUTED["operator"].value
