"""The EventBridge Scheduler's invocations of the scheduled function: budget-window open / close ticks,
the periodic reconcile, and the one-time schedules of plans falling due (maintenance, Capacity
Blocks), each run by the kind whose tick it is (gpuwarden/kinds/)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.handlers._runtime import deps, invocation_deps, prepare, respond, settings
from gpuwarden.kinds.inputs import parse_scheduler_tick
from gpuwarden.observability import logger, metrics
from gpuwarden.services.dispatch import handle
from gpuwarden.services.engine.context import Deps
from gpuwarden.wiring import scheduler_for


@cache
def _deps(own_arn: str) -> Deps:
    """A deferred maintenance plan schedules this very function again: its ARN comes from the
    invocation (an environment variable holding it would make the stack a dependency cycle)."""
    current = settings()
    target = current.windows_function_arn or own_arn
    return replace(deps(), scheduler=scheduler_for(current.model_copy(update={"windows_function_arn": target})))


@logger.inject_lambda_context(correlation_id_path="execution_id")
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    tick = parse_scheduler_tick(event)  # raises InvalidEvent: the async invoke fails into the DLQ
    current = invocation_deps(context, _deps(context.invoked_function_arn))
    return respond(handle(tick, current, drain_locally=False))  # counted and recorded there


prepare()  # Lambda's init phase: the client built and the imports frozen before the first event
