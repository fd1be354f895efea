"""What every deployed handler shares: dependencies built once per warm container, in the init
phase when the handler runs inside Lambda (docs/architecture.md, "Init and invocation")."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

from gpuwarden.adapters.stepfunctions import drain_starter
from gpuwarden.config import Settings
from gpuwarden.domain.errors import GpuwardenError, HandlingFailed
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.observability import logger
from gpuwarden.services.dispatch import handle
from gpuwarden.services.engine.context import Deps
from gpuwarden.services.engine.result import Result
from gpuwarden.sources.rules import Rule


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def rules() -> tuple[Rule, ...]:
    """The deployed EventBridge rules: a handler applies the same filters (a direct invoke too)."""
    from gpuwarden.wiring import deployed_rules

    return deployed_rules(settings())


def respond(result: Result) -> dict[str, Any]:
    """The JSON result; a failure (recorded in the ledger and the metric) raises so that the
    asynchronous invocation is retried and then lands in the dead-letter queue."""
    body = result.to_json()
    if result.outcome == "failed":
        raise HandlingFailed(result.reason, result=body)
    return body


@cache
def deps() -> Deps:
    from gpuwarden.wiring import build_deps

    current = settings()
    arn = current.drain_state_machine_arn
    start_drain = drain_starter(current.region, arn) if arn else None
    return build_deps(current, caller="eventbridge", start_drain=start_drain)


def prepare(*also: Callable[[], object]) -> None:
    """Called by every handler module at import: inside Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set),
    do in the init phase what the first event would otherwise wait for (`warm`), and ``also``
    what else that handler's first event reads (the deployed rules, for those that parse notices)."""
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        try:
            for build in also:
                build()
            warm(deps())
        except GpuwardenError as err:  # the first invocation tries again and reports it as its result
            logger.warning("init: dependencies not built", extra={"error": str(err), "type": type(err).__name__})


def warm(built: Deps) -> None:
    """Build the cluster client now (kubeconfig or EKS token, the ApiClient), then move every
    object made so far out of the garbage collector's sight (`gc.freeze`): otherwise the first
    event's allocations set off a full collection over everything the imports made, before its
    cordon. No collection before the freeze: walking those objects once costs the cold start
    ~60 ms of CPU to reclaim the few cycles the imports left (docs/benchmarks.md, "Cold start").
    A cluster that cannot be reached is no failure here: the port stays unbuilt, and the first
    event that needs it fails with the reason as its JSON result."""
    from gpuwarden.wiring import Lazy

    try:
        if isinstance(built.kube, Lazy):
            built.kube.build()
    finally:
        gc.freeze()


#: Kept back from the invocation's remaining time for what follows the waits: the result, the
#: ledger record, the Events and the metrics flush. What does not fit goes to the drain workflow.
SAFETY_MARGIN_SECONDS = 10.0


def time_budget(context: Any) -> Callable[[], float] | None:
    """Seconds this invocation may still wait, from Lambda's own clock (None without one)."""
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining_ms):
        return None
    return lambda: remaining_ms() / 1000.0 - SAFETY_MARGIN_SECONDS


def invocation_deps(context: Any, base: Deps | None = None) -> Deps:
    """This invocation's deps: the warm container's, bounded by the invocation's time budget."""
    return replace(base if base is not None else deps(), remaining=time_budget(context))


def handle_notices(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """An EventBridge event a kind's rule delivered: parsed as the deployed rules filter it, every
    notice dispatched to its kind. A parse failure raises InvalidEvent: the asynchronous invoke
    fails into the dead-letter queue."""
    batch = parse_notices(event, deployed=rules())
    return respond(handle(batch, invocation_deps(context), drain_locally=False))
