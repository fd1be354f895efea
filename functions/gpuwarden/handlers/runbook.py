"""Runbook actions by direct, synchronous invoke (docs/cli.md): the CLI's ``--remote``, the SSM
Automation documents, or ``aws lambda invoke``.

A payload that does not parse is answered, not raised: ``{"outcome": "invalid", "status": 400,
"error": …, "errors": [{"loc": [...], "msg": …}]}``. A synchronous caller has no dead-letter
queue and no retry to protect, and a raised error would reach it as an opaque
``Unhandled`` stack trace instead of the field that is wrong. Failures while acting on the
cluster still raise (typed errors): the invoke then reports ``FunctionError`` and the SSM step fails.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.handlers._runtime import invocation_deps, prepare
from gpuwarden.observability import count_event, logger, metrics
from gpuwarden.services.dispatch import handle
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps

_MAX_CALLER = 256


def caller_of(context: Any) -> str:
    """Who asked, as far as Lambda can tell: the invoker's ``ClientContext.custom.caller`` (the CLI
    sends its STS identity, the SSM documents their own name), a Cognito identity, else the
    ARN that was invoked. Self-reported: CloudTrail's Invoke record is the authoritative principal."""
    custom = getattr(getattr(context, "client_context", None), "custom", None)
    if isinstance(custom, dict) and custom.get("caller"):
        return str(custom["caller"])[:_MAX_CALLER]
    cognito = getattr(getattr(context, "identity", None), "cognito_identity_id", None)
    if cognito:
        return f"cognito:{cognito}"[:_MAX_CALLER]
    return f"invoke:{getattr(context, 'invoked_function_arn', None) or 'unknown'}"[:_MAX_CALLER]


def invalid_answer(err: InvalidEvent) -> dict[str, Any]:
    return {"outcome": "invalid", "status": 400, "error": str(err), "errors": err.errors}


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        request = parse_runbook(event)
    except InvalidEvent as err:
        logger.warning("invalid runbook request", extra={"errors": err.errors})
        return invalid_answer(err)
    request_deps = runbook_deps(replace(invocation_deps(context), caller=caller_of(context)), request)
    result = handle(request, request_deps, drain_locally=False)
    count_event(result.kind, result.outcome)
    return result.to_json()


prepare()  # Lambda's init phase: the client built and the imports frozen before the first event
