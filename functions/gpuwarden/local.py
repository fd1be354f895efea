"""Any input run in this process, exactly as deployed: the local twin of `handlers/` (docs/cli.md).

The input is parsed and routed by the deployed rules (`services.routes`), and run to its end, a
drain included. Every failure after parsing (no cluster, no credentials, an endpoint down,
retries exhausted) is the failed JSON result; input that does not parse and a policy that does
not validate raise (`InvalidEvent`, `InvalidPolicy`), for the caller to answer with exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuwarden.config import Settings
from gpuwarden.domain.errors import GpuwardenError, InvalidPolicy
from gpuwarden.services.engine.failures import failed_result
from gpuwarden.services.routes import handle_batch, handle_tick, tick_kind
from gpuwarden.sources import NoticeBatch, RunbookRequest, WindowTick, parse_event
from gpuwarden.wiring import build_deps, deployed_rules, runbook_deps

if TYPE_CHECKING:
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
    if isinstance(parsed, WindowTick):
        return _answered(
            lambda: handle_tick(parsed, deps or build_deps(settings, caller="cli")).to_json(),
            tick_kind(parsed),
            event_id=parsed.execution_id,
        )
    if not isinstance(parsed, NoticeBatch):
        raise GpuwardenError(f"{type(parsed).__name__} inputs are not handled by this version")
    first = parsed.notices[0] if parsed.notices else None
    return _answered(
        lambda: handle_batch(parsed, deps or build_deps(settings, caller="cli"), drain_locally=True).to_json(),
        parsed.reported_kind.value,
        event_id=first.event_id if first else parsed.event_id,
        node=first.node_name if first else None,
        instance_id=first.instance_id if first else None,
    )


def run_runbook(request: RunbookRequest, progress: Callable[[DrainProgress], None] | None = None) -> dict[str, Any]:
    """A runbook request against KUBECONFIG (or the policy's EKS cluster), with the same services
    as the deployed function; the drain runs here to its end. The caller is the OS user."""
    from gpuwarden.services.runbook.actions import run_runbook as run

    def answer() -> dict[str, Any]:
        deps = runbook_deps(build_deps(Settings.from_env()), request)
        return run(request, deps, drain_locally=True, progress=progress).to_json()

    extra = {"action": request.action, "dry_run": request.dry_run}
    return _answered(answer, "manual", node=request.node, instance_id=request.instance_id, extra=extra)


def run_release(node: str | None, dry_run: bool) -> dict[str, Any]:
    """`gpuwarden release`: every gpuwarden mark taken back (one node, or ``node`` None: all,
    NodePools included), against KUBECONFIG; ``dry_run`` writes nothing (docs/rollback.md)."""
    from gpuwarden.services.release.release import release
    from gpuwarden.wiring import dry_run_view

    def answer() -> dict[str, Any]:
        deps = build_deps(Settings.from_env())
        return release(dry_run_view(deps) if dry_run else deps, node=node).to_json()

    return _answered(answer, "manual", node=node, extra={"action": "release", "dry_run": dry_run})


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
