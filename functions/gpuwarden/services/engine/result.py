"""The JSON answer of every entry point (docs/results.md): its shape, how several answers make one,
and where every answer leaves the services: its ledger entry and its metric (`answered`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.alerts import UNMAPPED_KIND
from gpuwarden.domain.errors import CloudError
from gpuwarden.domain.gang_progress import asked_here, merge_looks
from gpuwarden.observability import count_event, logger

if TYPE_CHECKING:
    from gpuwarden.domain.notice import Notice
    from gpuwarden.domain.views import NodeView
    from gpuwarden.services.engine.context import Deps, Recorder

Outcome = Literal["handled", "ignored", "duplicate", "dry-run", "failed"]
#: The replacement Karpenter's provisioner makes for a node whose NodeClaim it is deleting
LEFT_TO_KARPENTER = "left to Karpenter"
#: ``left_to`` of a `replacement-skipped` action: Karpenter makes this node's replacement itself
KARPENTER = "Karpenter"


def finished(dry_run: bool, otherwise: Outcome = "handled") -> Outcome:
    """The outcome of a run that went to its end: ``dry-run`` when nothing was written (the
    adapters only recorded the writes), else ``otherwise`` (``handled``, or ``duplicate`` when
    another run had already done it)."""
    return "dry-run" if dry_run else otherwise


def replacement_of(actions: list[dict[str, Any]]) -> str | None:
    """What the run's actions say about the node's replacement capacity."""
    for action in actions:
        if action["type"] == ActionType.REPLACEMENT:
            return str(action.get("target"))
    for action in actions:
        if action["type"] == ActionType.REPLACEMENT_SKIPPED and action.get("left_to") == KARPENTER:
            return LEFT_TO_KARPENTER
    return None


def merged_checkpoints(results: list[Result]) -> list[dict[str, Any]] | None:
    """One entry per gang over several nodes' results (a Capacity Block's): every node's looks
    merged (`merge_looks`)."""
    merged: dict[str, dict[str, Any]] = {}
    for look in (c for r in results for c in r.checkpoints or ()):
        merged[look["gang"]] = merge_looks(merged.get(look["gang"], {}), look, waiting_from_look=False)
    return [merged[k] for k in sorted(merged)] or None


class Result(BaseModel):
    outcome: Outcome
    kind: str
    #: runbook requests only (docs/results.md): the action asked for, and whether nothing was changed
    action: str | None = None
    dry_run: bool | None = None
    node: str | None = None
    instance_id: str | None = None
    event_id: str | None = None
    reason: str
    deadline: datetime | None = None
    actions: list[dict[str, Any]] = Field(default_factory=list)
    plan: list[dict[str, Any]] | None = None
    drain: dict[str, Any] | None = None
    seconds_left: float | None = None
    results: list[Result] | None = None
    #: runbook `status`: what gpuwarden knows of the node
    status: dict[str, Any] | None = None
    #: budget-window ticks: every NodePool looked at, with what was done or why not
    nodepools: list[dict[str, Any]] | None = None
    #: the node's replacement capacity when this run decided it: what was launched
    #: (`nodeclaim/<name>`, `asg/<group>`, `fleet/<id>`) or `left to Karpenter`
    replacement: str | None = None
    #: each gang this run asked to checkpoint (docs/results.md): gang, by, asked, acknowledged, timed_out
    checkpoints: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _asked_by_this_run(self) -> Result:
        """``checkpoints.asked`` names only the pods this run asked (`asked_here`)."""
        if self.checkpoints:
            asked = {str(a.get("pod")) for a in self.actions if a["type"] == ActionType.CHECKPOINT_REQUESTED}
            self.checkpoints = asked_here(self.checkpoints, asked)
        return self

    def to_json(self) -> dict[str, Any]:
        """The JSON answer; ``node`` is always there (null when the event names no node of the cluster)."""
        data = self.model_dump(mode="json", exclude_none=True)
        return {"outcome": data.pop("outcome"), "kind": data.pop("kind"), "node": data.pop("node", None), **data}


def notice_result(notice: Notice, recorder: Recorder, node: NodeView | None, **fields: Any) -> Result:
    """The answer to one notice (the dispatch records it in the ledger: `answered`): the run's
    actions and replacement, and ``fields`` (a run that asked gangs passes their ``checkpoints``)."""
    return Result(
        kind=notice.kind.value,
        node=node.name if node else notice.node_name,
        instance_id=notice.instance_id or (node.instance_id if node else None),
        event_id=notice.event_id,
        deadline=notice.deadline,
        actions=recorder.actions,
        **({"replacement": replacement_of(recorder.actions)} | fields),
    )


def _history(previous: dict[str, Any]) -> str:
    earlier = str(previous.get("history") or "")
    at = previous.get("updated_at")
    line = f"{previous.get('outcome')}{f' at {at}' if at else ''}: {previous.get('reason', '')}"
    return f"{earlier} | {line}" if earlier else line


def record_result(result: Result, deps: Deps) -> Result:
    """The answer written to the ledger under its event id: the one place, called by `answered`
    where a notice's or a tick's answer leaves the services (docs/results.md, "The ledger").

    A duplicate (and an event ignored again) is counted on the event's record. A redelivery that
    resumed work an earlier delivery had failed to finish (its record says `failed`) is that
    event's answer: `handled`, the earlier failure kept in the record's `history`. Any other
    outcome is recorded with who asked.
    """
    event_id = result.event_id
    if event_id is None:
        return result
    previous = deps.ledger.get(event_id)
    before = previous.get("outcome") if previous is not None else None
    failed_before = before == "failed"
    # a redelivery ignored again, or one that found the work applied: counted on the record
    if (result.outcome == "duplicate" and not failed_before) or (result.outcome == before == "ignored"):
        deps.ledger.count_duplicate(event_id)
        return result
    if result.outcome == "duplicate":
        reason = f"resumed after a failed delivery: {result.reason}"
        result = result.model_copy(update={"outcome": "handled", "reason": reason})
    entry = {"outcome": result.outcome, "kind": result.kind, "node": result.node or "", "reason": result.reason}
    handed = [a for a in result.actions if a.get("type") == ActionType.HANDED_ON]
    if handed:  # after the mark, the run's own work failed and the drain workflow took over
        entry["handed_on"] = str(handed[-1].get("reason", ""))
    if failed_before:
        assert previous is not None
        entry["history"] = _history(previous)
    deps.ledger.record(event_id, entry | {"caller": deps.caller})
    return result


# --------------------------------------------------------------------------- leaving the services


def _recorded(result: Result, deps: Deps) -> Result:
    """The answers it sums first (each under its own event id: a Capacity Block's nodes), then itself."""
    children = [_recorded(child, deps) for child in result.results or []]
    if children:
        result = result.model_copy(update={"results": children})
    return record_result(result, deps)


def answered(result: Result, deps: Deps, *, count: bool = True) -> Result:
    """Where an answer leaves the services: recorded in the ledger (`record_result`), its own and
    the answers it sums, and counted (the ``Events`` metric) unless ``count`` is False."""
    result = _recorded(result, deps)
    if count:
        count_event(result.kind, result.outcome)
    return result


def failed(result: Result, deps: Deps) -> Result:
    """A failed answer (`failures.failed_result` counted it) is recorded too; a ledger that fails as
    well is not the failure reported."""
    try:
        return _recorded(result, deps)
    except CloudError as ledger_err:
        logger.warning("failure not recorded in the ledger", extra={"error": str(ledger_err)})
        return result


#: How several answers sum up: the first of these any of them has (none of them: ignored).
_SUMMED_BY: tuple[Outcome, ...] = ("failed", "handled", "dry-run", "duplicate")


def summed_outcome(results: Sequence[Result]) -> Outcome:
    """The outcome of several answers taken together: failed if any failed, else handled if any was,
    else dry-run, else duplicate, else ignored."""
    outcomes = {r.outcome for r in results}
    return next((o for o in _SUMMED_BY if o in outcomes), "ignored")


def summed(results: list[Result], *, where: str = "instances", **fields: Any) -> Result:
    """Several answers (already answered each: notices of one event, the nodes of a Capacity Block,
    a scan's kinds) as one: `summed_outcome`, their actions in order, each answer under
    ``results``; ``where`` says what they are answers for, ``fields`` what else the sum carries."""
    if len(results) == 1:
        return results[0]
    described = "; ".join(f"{r.node or r.instance_id}: {r.outcome}" for r in results)
    return Result(
        outcome=summed_outcome(results),
        kind=results[0].kind,
        reason=f"{len(results)} {where}: {described}",
        actions=[a for r in results for a in r.actions],
        results=results,
        **fields,
    )


def alerts_answer(
    results: list[Result], acted: list[Result], deps: Deps, *, message_id: str, lost: str | None
) -> Result:
    """An Alertmanager notification's answer (docs/gpu-signals.md): with nothing acted on, one
    ignored answer recorded under the message id, the alerts' reasons in it; with one node acted on
    (a dcgm-exporter alert fires per GPU), that node's answer with the others beside it. What a
    truncated message lost is said in the reason."""
    if not acted:
        reasons = [r.reason for r in results] or [f"notification {message_id} carries no alert"]
        reason = "; ".join([*reasons[:10], *([lost] if lost else [])])
        kind = results[0].kind if results else UNMAPPED_KIND.value
        ignored = answered(Result(outcome="ignored", kind=kind, reason=reason, event_id=message_id), deps)
        return ignored.model_copy(update={"results": results}) if len(results) > 1 else ignored
    answer = acted[0] if len(results) == 1 else summed(results)
    if len(acted) == 1 and len(results) > 1:
        answer = acted[0].model_copy(update={"results": results})
    if lost:
        logger.warning("alertmanager notification truncated", extra={"message_id": message_id, "lost": lost})
        answer = answer.model_copy(update={"reason": f"{answer.reason}; {lost}"})
    return answer
