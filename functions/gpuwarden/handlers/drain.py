"""One `round_of` round, driven by the Step Functions loop (Wait → drain → done?).

The workflow passes ``{"state": <DrainState>, "retry_count": $$.State.RetryCount}``; a round that
fails raises the error name the workflow retries or ends on (`domain.drain_faults`).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.domain.drain_faults import drain_failure
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.handlers._runtime import invocation_deps, prepare
from gpuwarden.observability import logger, metrics
from gpuwarden.services.dispatch import drain_round
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.drain import DrainState, round_facts


def workflow_round(deps: Deps, event: dict[str, Any]) -> dict[str, Any]:
    """One round of the workflow's input (the wrapped shape, or a bare state: retry 0)."""
    raw = event.get("state", event)
    state = DrainState.model_validate(raw)
    retries = int(event.get("retry_count", 0)) if "state" in event else 0
    recorder = Recorder(deps, state.event_id)
    try:
        next_state = drain_round(recorder, state)  # settled by its kind
    except GpuwardenError as err:
        mapped = drain_failure(err, round_facts(recorder, state), retries=retries, now=deps.clock())
        logger.warning("drain round failed", extra={"node": state.node, "error": type(mapped).__name__})
        if mapped is err:
            raise
        raise mapped from err
    return next_state.model_dump(mode="json") | {"wait_seconds": max(1, round(next_state.wait_seconds))}


@logger.inject_lambda_context(correlation_id_path="state.event_id")
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return workflow_round(invocation_deps(context), event)


prepare()  # Lambda's init phase: the client built and the imports frozen before the first event
