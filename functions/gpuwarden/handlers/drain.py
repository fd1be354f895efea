"""One `drain_step` round, driven by the Step Functions loop (Wait → drain → done?)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.handlers._runtime import invocation_deps, prepare
from gpuwarden.observability import logger, metrics
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.routes import drain_round


@logger.inject_lambda_context(correlation_id_path="event_id")
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = DrainState.model_validate(event)
    recorder = Recorder(invocation_deps(context), state.event_id)
    next_state = drain_round(recorder, state)  # settled by its kind (gpu-idle: retire / give back)
    return next_state.model_dump(mode="json") | {"wait_seconds": max(1, round(next_state.wait_seconds))}


prepare()  # Lambda's init phase: the client built and the imports frozen before the first event
