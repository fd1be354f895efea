"""The planning function: EventBridge events that announce a loss ahead of time, for a drain to be
planned before it (AWS Health scheduled changes to EC2 instances, Capacity Blocks delivered): the
rules of the kinds whose route is ``planning`` (gpuwarden/kinds/)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.handlers._runtime import handle_notices, prepare, rules
from gpuwarden.observability import logger, metrics


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_notices(event, context)


prepare(rules)  # Lambda's init phase: the client built and the imports frozen before the first event
