"""The adapters' edge: SDK exceptions become gpuwarden's typed errors, naming what failed and where.

Decisions read the types (`NoCredentials`, `CloudUnreachable`, `ClusterUnreachable`), never the
messages; the messages are for people (the JSON result's ``reason``, the logs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from gpuwarden.domain.errors import (
    CloudError,
    CloudNotFound,
    CloudUnreachable,
    ClusterUnreachable,
    GpuwardenError,
    NoCredentials,
)

E = TypeVar("E", bound=GpuwardenError)


def aws_error(err: Exception, call: str, *, base: type[CloudError] | type[E] = CloudError) -> GpuwardenError:
    """The typed error for a botocore exception raised by ``call`` (e.g. "EC2 DescribeInstances i-…").

    Missing credentials or region and unreachable endpoints have their own types whatever
    ``base`` is; anything else (an API error that outlived the SDK's retries) is ``base``.
    """
    from botocore.exceptions import (
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    if isinstance(err, NoCredentialsError | PartialCredentialsError):
        return NoCredentials(f"{call}: no AWS credentials found (the SDK's standard chain): {err}")
    if isinstance(err, NoRegionError):
        return NoCredentials(f"{call}: no AWS region configured (AWS_REGION): {err}")
    if isinstance(err, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionClosedError):
        return CloudUnreachable(f"{call}: AWS endpoint unreachable: {err}")
    code, retries = _answer(err)
    if "NotFound" in code:  # the API's error code (ResourceNotFoundException, InvalidInstanceID.NotFound, …)
        return CloudNotFound(f"{call}: {err}")
    typed = base(f"{call}: {err}")
    return typed.after_retries() if retries else typed


def _answer(err: Exception) -> tuple[str, int]:
    """The AWS error code of an API answer, and how often the SDK retried the call (its response
    metadata's ``RetryAttempts``); ("", 0) for anything that is not an answer."""
    from botocore.exceptions import ClientError

    if not isinstance(err, ClientError):
        return "", 0
    response = err.response or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    return code, int((response.get("ResponseMetadata") or {}).get("RetryAttempts") or 0)


@contextmanager
def aws_call(call: str, *, base: type[CloudError] | type[E] = CloudError) -> Iterator[None]:
    """Run AWS SDK calls; any botocore error leaves as the typed error for ``call``."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError) as err:
        raise aws_error(err, call, base=base) from err


def cluster_unreachable(what: str, err: Exception) -> ClusterUnreachable:
    return ClusterUnreachable(f"Kubernetes API {what} unreachable: {type(err).__name__}: {err}")
