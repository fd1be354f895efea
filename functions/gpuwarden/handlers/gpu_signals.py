"""The GPU function: the GPU signals. EventBridge `aws.cloudwatch` GPU-idle alarm and alarm-contributor
state changes, the Alertmanager topic's SNS notifications, and the every-minute GPU-health scan's
Scheduler input (docs/gpu-signals.md)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.adapters.alerts_received import client as alerts_client
from gpuwarden.adapters.alerts_received import remember
from gpuwarden.domain.alerts_received import received
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.handlers._runtime import handle_notices, invocation_deps, prepare, respond, rules, settings
from gpuwarden.observability import logger, metrics
from gpuwarden.services.dispatch import handle
from gpuwarden.sources import SCAN_MARKER, is_sns_event, parse_scan_tick, parse_sns
from gpuwarden.sources.sns import AlertBatch


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # each parse raises InvalidEvent: the async invoke fails into the DLQ
    if event.get("gpuwarden") == SCAN_MARKER:
        return respond(handle(parse_scan_tick(event), invocation_deps(context), drain_locally=False))
    if is_sns_event(event):
        batch = parse_sns(event)
        try:
            return respond(handle(batch, invocation_deps(context), drain_locally=False))
        finally:  # after the cordons: the record is for `gpuwarden doctor`, and handling never waits on it
            remember_alerts(batch)
    return handle_notices(event, context)


def remember_alerts(batch: AlertBatch) -> None:
    """The node labels of the notification's firing alerts, by alert name, for `gpuwarden doctor`
    (docs/gpu-signals.md, "Checking the node label"). A failure is logged: handling never waits on it."""
    table = settings().state_table
    if not table:
        return
    try:
        remember(table, settings().region, received(batch.alerts, batch.published))
    except GpuwardenError as err:
        logger.warning("alerts received not recorded", extra={"error": str(err)})


def _alerts_table_client() -> object:
    """The DynamoDB client `remember_alerts` writes with, made in the init phase, not on the first alert."""
    return alerts_client(settings().region) if settings().state_table else None


# Lambda's init phase: the clients built, the imports frozen before the first event.
prepare(rules, _alerts_table_client)
