"""Every failure is the contract's JSON result (docs/results.md): ``outcome: failed``, the kind,
the node (null when unknown) and a reason naming what failed and where. The ``Events`` metric
counts it here; the routing table records it in the ledger (`result.record_result`); deployed,
the handler raises after that, so the event is retried and then lands in the dead-letter queue.
"""

from __future__ import annotations

from gpuwarden.domain.errors import (
    CloudError,
    CloudNotFound,
    CloudUnreachable,
    ClusterUnreachable,
    DrainGaveUp,
    GpuwardenError,
    InvalidPolicy,
    KubeError,
    NoCredentials,
    NotFound,
    ReplacementError,
)
from gpuwarden.domain.notice import Notice
from gpuwarden.observability import count_event, logger
from gpuwarden.services.engine.result import Result

#: What failed, by the error's type (most specific first). A 404 or a not-found is its own reason.
_WHAT: tuple[tuple[type[GpuwardenError], str], ...] = (
    (InvalidPolicy, "invalid configuration"),
    (DrainGaveUp, "drain not finished"),
    (ClusterUnreachable, "no cluster reachable"),
    (NoCredentials, "no AWS credentials"),
    (CloudUnreachable, "AWS endpoint down"),
    (NotFound, "not found in the cluster"),
    (CloudNotFound, "not found in AWS"),
    (KubeError, "Kubernetes API call failed"),
    (ReplacementError, "replacement capacity could not be launched"),
    (CloudError, "AWS API call failed"),
)


def what_failed(err: GpuwardenError) -> str:
    """What failed, by the error's type; "after its retries" only where retries happened."""
    what = next((what for kind, what in _WHAT if isinstance(err, kind)), "failed")
    return f"{what} after its retries" if err.retried else what


def failed_result(
    kind: str,
    err: GpuwardenError,
    *,
    event_id: str | None = None,
    node: str | None = None,
    instance_id: str | None = None,
) -> Result:
    """The answer to an event whose handling failed, logged and counted; it keeps the node the run
    had found and the actions it had taken (`GpuwardenError.done_so_far`)."""
    node = err.node or node
    result = Result(
        outcome="failed",
        kind=kind,
        node=node,
        instance_id=instance_id,
        event_id=event_id,
        reason=f"{what_failed(err)}: {err}",
        actions=list(err.actions),
    )
    logger.error("failed", extra={"kind": kind, "event_id": event_id, "node": node, "error": str(err)})
    count_event(kind, "failed")
    return result


def failed_notice(notice: Notice, err: GpuwardenError) -> Result:
    """The failed result of one notice, under the notice's event."""
    return failed_result(
        notice.kind.value, err, event_id=notice.event_id, node=notice.node_name, instance_id=notice.instance_id
    )
