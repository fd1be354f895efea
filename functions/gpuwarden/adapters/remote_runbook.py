"""The deployed runbook function, invoked from the command line (`gpuwarden runbook --remote`)."""

from __future__ import annotations

import base64
import getpass
import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpuwarden.adapters.sdk import client
from gpuwarden.domain.errors import CloudError, InvalidEvent


def whoami() -> str:
    """The caller's AWS identity, else the OS user (recorded by the function as who asked)."""
    try:
        return str(client("sts").get_caller_identity()["Arn"])
    except (BotoCoreError, ClientError):
        return f"cli:{getpass.getuser()}"


def invoke_runbook(function: str, payload: dict[str, Any]) -> dict[str, Any]:
    """`lambda.invoke` (RequestResponse) of the deployed runbook function; its JSON answer.
    Who asked goes in the ClientContext (the function records it; CloudTrail has the
    authoritative principal). Raises `CloudError` when the invoke or the function failed,
    `InvalidEvent` when the function refused the payload."""
    context = base64.b64encode(json.dumps({"custom": {"caller": whoami()}}).encode()).decode()
    try:
        response = client("lambda").invoke(
            FunctionName=function,
            InvocationType="RequestResponse",
            Payload=json.dumps(payload).encode(),
            ClientContext=context,
        )
        body = json.loads(response["Payload"].read() or b"null")
    except (BotoCoreError, ClientError, ValueError) as err:
        raise CloudError(f"invoke of {function} failed: {err}") from err
    if response.get("FunctionError"):
        detail = body if isinstance(body, dict) else {}
        raise CloudError(f"{function} failed: {detail.get('errorType', 'error')}: {detail.get('errorMessage', body)}")
    if isinstance(body, dict) and body.get("outcome") == "invalid":
        raise InvalidEvent(str(body.get("error")), errors=list(body.get("errors") or []))
    if not isinstance(body, dict):
        raise CloudError(f"{function} answered {body!r}, not a runbook result")
    return body
