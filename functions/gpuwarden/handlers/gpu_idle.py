"""The GPU function: EventBridge `aws.cloudwatch` GPU-idle alarm and alarm-contributor state changes,
the Alertmanager topic's SNS notifications, and the every-minute GPU-health scan (docs/gpu-signals.md)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.handlers._runtime import answer, invocation_deps, prepare, rules
from gpuwarden.observability import logger, metrics
from gpuwarden.services.routes import handle_alerts, handle_batch, handle_scan
from gpuwarden.sources import SCAN_MARKER, is_sns_event, parse_notices, parse_scan_tick, parse_sns


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # each parse raises InvalidEvent: the async invoke fails into the DLQ
    if event.get("gpuwarden") == SCAN_MARKER:
        return answer(handle_scan(parse_scan_tick(event), invocation_deps(context), drain_locally=False))
    if is_sns_event(event):
        return answer(handle_alerts(parse_sns(event), invocation_deps(context), drain_locally=False))
    batch = parse_notices(event, deployed=rules())
    return answer(handle_batch(batch, invocation_deps(context), drain_locally=False))


prepare(rules)  # Lambda's init phase: the client built and the imports frozen before the first event
