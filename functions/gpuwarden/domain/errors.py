"""Typed errors. Every failure gpuwarden raises on purpose is one of these."""

from __future__ import annotations

from typing import Any, Self


class GpuwardenError(Exception):
    """Base of every error gpuwarden raises on purpose.

    ``node`` and ``actions``: what the run had found and done when it failed (`done_so_far`), so
    that a failed answer keeps the steps that were taken (docs/results.md)."""

    node: str | None = None
    actions: tuple[dict[str, Any], ...] = ()
    #: The call was tried again before this was raised (the client's or the SDK's own retries): only
    #: then does the reason say "after its retries" (`engine.failures.what_failed`).
    retried: bool = False

    def after_retries(self) -> Self:
        """This error, marked as raised once the retries were spent."""
        self.retried = True
        return self

    def done_so_far(self, node: str | None, actions: list[dict[str, Any]]) -> Self:
        """This error, carrying the node and the actions of the run it ended."""
        self.node = node or self.node
        self.actions = tuple(actions)
        return self


class InvalidEvent(GpuwardenError):
    """The input does not parse: nothing was done. Exit 2 / dead-letter queue."""

    def __init__(self, message: str, *, errors: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class InvalidPolicy(GpuwardenError):
    """The policy document cannot be read or does not validate. ``source`` names where it came
    from; ``problems`` holds one line per error (the key's path, what was given, what is allowed),
    which the message joins with "; " and a terminal shows one per line."""

    def __init__(self, message: str, *, source: str | None = None, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.source = source
        self.problems = problems


class PolicyNotFound(InvalidPolicy):
    """The policy file named by GPUWARDEN_POLICY_FILE is not there."""


class InvalidSetting(InvalidPolicy):
    """A setting (environment variable, CDK context value, kubeconfig) gpuwarden does not
    understand: it refuses to run, exit 2, naming the setting and what it accepts."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


class KubeError(GpuwardenError):
    """A Kubernetes API call failed: the API server answered an error, or its retries ran out
    (``retried``)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ClusterUnreachable(KubeError):
    """The Kubernetes API cannot be reached at all (no cluster configured, connection refused,
    DNS, TLS, timeouts after the retries): nothing was read or written."""


class Conflict(KubeError):
    """A resourceVersion-checked write lost the race (HTTP 409)."""


class WriteConflicts(KubeError):
    """A resourceVersion-checked write lost the race too many times in a row (`engine.writes`):
    the object is too busy to write now; nothing was half-written."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what}: {limit} write conflicts in a row", status=409)


class NotFound(KubeError):
    """The object is gone (HTTP 404)."""


class CloudError(GpuwardenError):
    """An AWS call failed: the API answered an error, or the SDK's retries ran out (``retried``)."""


class CloudNotFound(CloudError):
    """An AWS API answered that what was asked for does not exist (a `…NotFound…` error code): an
    answer, not a fault; nothing was retried."""


class NoCredentials(CloudError):
    """The AWS SDK found no credentials (or no region) in its standard chain."""


class CloudUnreachable(CloudError):
    """An AWS endpoint could not be reached (connection refused, DNS, timeouts after the retries)."""


class ReplacementError(GpuwardenError):
    """Replacement capacity could not be launched."""


class HandlingFailed(GpuwardenError):
    """Deployed: the event's handling failed and was recorded; raised so that the asynchronous
    invocation fails into the dead-letter queue. ``result`` is the failed JSON result."""

    def __init__(self, message: str, *, result: dict[str, object]) -> None:
        super().__init__(message)
        self.result = result


class DrainInterrupted(GpuwardenError):
    """A drain workflow round failed for a reason that retrying may fix. Deployed, the class name
    of each subclass is the error name the workflow's Retry matches (docs/architecture.md, "The
    drain workflow"); the message says what failed and what the node still holds."""


class DrainClusterUnreachable(DrainInterrupted):
    """The Kubernetes API could not be reached at all this round."""


class DrainApiRetriesExhausted(DrainInterrupted):
    """A Kubernetes API call answered 5xx / 429 (or dropped) more often than the client retries."""


class DrainConflictsExhausted(DrainInterrupted):
    """A resourceVersion-checked write lost every race this round."""


class DrainGaveUp(GpuwardenError):
    """The drain round failed again and the notice's deadline (or, for a voluntary kind, the bound on
    retries) leaves no more room: the workflow ends in its `NotDrained` state with this message,
    which names what is left on the node."""


class NoFittingReplacement(ReplacementError):
    """No NodeClaim from the node's NodePool can hold the pods being moved (their nodeSelector,
    required node affinity or tolerations rule the NodePool out): none is launched, and why is
    recorded as `replacement-skipped`."""
