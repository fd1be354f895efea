"""EventBridge `aws.ec2`: Spot interruption warnings, rebalance recommendations, state changes."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.handlers._runtime import answer, invocation_deps, prepare, rules
from gpuwarden.observability import logger, metrics
from gpuwarden.services.routes import handle_batch
from gpuwarden.sources import parse_notices


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = parse_notices(event, deployed=rules())  # raises InvalidEvent: the async invoke fails into the DLQ
    return answer(handle_batch(batch, invocation_deps(context), drain_locally=False))


prepare(rules)  # Lambda's init phase: the client built and the imports frozen before the first event
