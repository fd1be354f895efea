"""EventBridge Scheduler: budget-window open / close / reconcile ticks and maintenance plans falling due."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.handlers._runtime import deps
from gpuwarden.observability import logger, metrics
from gpuwarden.services.windows import handle_window_tick
from gpuwarden.sources import parse_window_tick


@logger.inject_lambda_context(correlation_id_path="execution_id")
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    tick = parse_window_tick(event)  # raises InvalidEvent: the async invoke fails into the DLQ
    return handle_window_tick(tick, deps(), drain_locally=False).to_json()
