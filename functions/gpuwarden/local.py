"""Any input run in this process, exactly as deployed: the local twin of `handlers/` (docs/cli.md).

The input is parsed as the deployed rules filter it, dispatched to its kind (`services.dispatch`),
and run to its end, a
drain included. Every failure after parsing (no cluster, no credentials, an endpoint down,
retries exhausted) is the failed JSON result; input that does not parse and a policy that does
not validate raise (`InvalidEvent`, `InvalidPolicy`), for the caller to answer with exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuwarden.config import Settings
from gpuwarden.domain.errors import GpuwardenError, InvalidPolicy
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.kinds.registry import SCAN_KIND
from gpuwarden.services.dispatch import fallback_kind, handle, handle_release, tick_kind
from gpuwarden.services.engine.failures import failed_result
from gpuwarden.sources import AlertBatch, NoticeBatch, RunbookRequest, ScanTick, SchedulerTick
from gpuwarden.wiring import build_deps, deployed_rules, runbook_deps

if TYPE_CHECKING:
    from gpuwarden.kinds.inputs import Parsed
    from gpuwarden.services.engine.context import Deps
    from gpuwarden.services.runbook.actions import DrainProgress


def run_event(raw: object, deps: Deps | None = None, *, dry_run: bool = False) -> dict[str, Any]:
    """Parse and route one event exactly as deployed, then run it to the end (drain included).
    `deps`: what to run with (default: built from the environment, as `invoke` does;
    `gpuwarden simulate` passes the simulator's). `dry_run` (`invoke --dry-run`): as DRY_RUN=true."""
    settings = Settings.from_env()
    if dry_run:
        settings = settings.model_copy(update={"dry_run": True})
    parsed = parse_event(raw, deployed=deployed_rules(settings))
    if isinstance(parsed, RunbookRequest):  # as a direct invoke of the runbook function would
        return run_runbook(parsed.model_copy(update={"dry_run": True}) if dry_run else parsed)
    kind, event_id, node, instance_id = _reported_as(parsed, raw)
    return _answered(
        lambda: handle(parsed, deps or build_deps(settings, caller="cli")).to_json(),
        kind,
        event_id=event_id,
        node=node,
        instance_id=instance_id,
    )


def _reported_as(parsed: Parsed, raw: object) -> tuple[str, str | None, str | None, str | None]:
    """What a failure of ``parsed`` reports: its kind, event id, node and instance."""
    if isinstance(parsed, SchedulerTick):
        return tick_kind(parsed), parsed.execution_id, None, None
    if isinstance(parsed, ScanTick):
        return SCAN_KIND.value, None, None, None
    if isinstance(parsed, AlertBatch):
        return fallback_kind(raw), parsed.message_id, None, None
    if not isinstance(parsed, NoticeBatch):  # a runbook request is run by `run_runbook`
        raise GpuwardenError(f"{type(parsed).__name__} inputs are not handled by this version")
    first = parsed.notices[0] if parsed.notices else None
    if first is None:
        return parsed.kind.value, parsed.event_id, None, None
    return parsed.kind.value, first.event_id, first.node_name, first.instance_id


def run_scan(deps: Deps | None = None) -> dict[str, Any]:
    """One GPU-health scan against KUBECONFIG (or the policy's EKS cluster), as the deployed
    schedule runs it; each unhealthy node's drain runs here to its end."""

    def answer() -> dict[str, Any]:
        return handle(ScanTick(), deps or build_deps(Settings.from_env(), caller="cli")).to_json()

    return _answered(answer, SCAN_KIND.value)


def run_runbook(request: RunbookRequest, progress: Callable[[DrainProgress], None] | None = None) -> dict[str, Any]:
    """A runbook request against KUBECONFIG (or the policy's EKS cluster), with the same services
    as the deployed function; the drain runs here to its end. The caller is the OS user."""

    def answer() -> dict[str, Any]:
        deps = runbook_deps(build_deps(Settings.from_env()), request)
        return handle(request, deps, progress=progress).to_json()

    extra = {"action": request.action, "dry_run": request.dry_run}
    return _answered(answer, "manual", node=request.node, instance_id=request.instance_id, extra=extra)


def _answered(
    run: Callable[[], dict[str, Any]],
    kind: str,
    *,
    event_id: str | None = None,
    node: str | None = None,
    instance_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one error-to-result path: a failure after parsing is the failed JSON result."""
    try:
        return run()
    except InvalidPolicy:
        raise
    except GpuwardenError as err:
        failed = failed_result(kind, err, event_id=event_id, node=node, instance_id=instance_id).to_json()
        return failed | (extra or {})


def run_release(node: str | None, *, dry_run: bool = False) -> dict[str, Any]:
    """`gpuwarden release`: against KUBECONFIG (or the policy's EKS cluster); ``node`` None: every
    node and NodePool. A failure to reach the cluster is the failed JSON answer."""
    return _answered(
        lambda: handle_release(build_deps(Settings.from_env(), dry_run=dry_run or None, caller="cli"), node).to_json(),
        "manual",
        node=node,
    )


def target_of(raw: object) -> tuple[str | None, str | None]:
    """The node (or instance) an event acts on, as its route parses it: what a Ctrl-C reports the
    state of. (None, None) for an event that names none, or that does not parse."""
    try:
        parsed = parse_event(raw, deployed=deployed_rules(Settings.from_env()))
    except GpuwardenError:
        return None, None
    if isinstance(parsed, RunbookRequest):
        return parsed.node, parsed.instance_id
    if isinstance(parsed, NoticeBatch) and parsed.notices:
        return parsed.notices[0].node_name, parsed.notices[0].instance_id
    return None, None
