"""Typed errors. Every failure gpuwarden raises on purpose is one of these."""

from __future__ import annotations


class GpuwardenError(Exception):
    """Base of every error gpuwarden raises on purpose."""


class InvalidEvent(GpuwardenError):
    """The input does not parse: nothing was done. Exit 2 / dead-letter queue."""

    def __init__(self, message: str, *, errors: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class InvalidPolicy(GpuwardenError):
    """The policy document does not validate."""


class InvalidSetting(InvalidPolicy):
    """A setting (environment variable, CDK context value, kubeconfig) gpuwarden does not
    understand: it refuses to run, exit 2, naming the setting and what it accepts."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


class KubeError(GpuwardenError):
    """A Kubernetes API call failed after its retries."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ClusterUnreachable(KubeError):
    """The Kubernetes API cannot be reached at all (no cluster configured, connection refused,
    DNS, TLS, timeouts after the retries): nothing was read or written."""


class Conflict(KubeError):
    """A resourceVersion-checked write lost the race (HTTP 409)."""


class NotFound(KubeError):
    """The object is gone (HTTP 404)."""


class EvictionBlocked(KubeError):
    """A PodDisruptionBudget does not allow the eviction now (HTTP 429)."""


class CloudError(GpuwardenError):
    """An AWS call failed after its retries."""


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
