"""Every failure is the contract's JSON result (docs/results.md): ``outcome: failed``, the kind,
the node (null when unknown) and a reason naming what failed and where. The ledger and the
``Events`` metric record it; deployed, the handler raises after recording, so the event still
lands in the dead-letter queue.
"""

from __future__ import annotations

from gpuwarden.domain.errors import (
    CloudError,
    CloudUnreachable,
    ClusterUnreachable,
    GpuwardenError,
    InvalidPolicy,
    KubeError,
    NoCredentials,
    ReplacementError,
)
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.ports import LedgerPort
from gpuwarden.observability import count_event, logger
from gpuwarden.services.engine.context import Deps
from gpuwarden.services.engine.result import Result

#: What failed, by the error's type (most specific first).
_WHAT: tuple[tuple[type[GpuwardenError], str], ...] = (
    (InvalidPolicy, "invalid configuration"),
    (ClusterUnreachable, "no cluster reachable"),
    (NoCredentials, "no AWS credentials"),
    (CloudUnreachable, "AWS endpoint down"),
    (KubeError, "Kubernetes API call failed after its retries"),
    (ReplacementError, "replacement capacity could not be launched"),
    (CloudError, "AWS API call failed after its retries"),
)


def what_failed(err: GpuwardenError) -> str:
    return next((what for kind, what in _WHAT if isinstance(err, kind)), "failed")


def failed_result(
    kind: str,
    err: GpuwardenError,
    *,
    event_id: str | None = None,
    node: str | None = None,
    instance_id: str | None = None,
    ledger: LedgerPort | None = None,
    caller: str = "gpuwarden",
) -> Result:
    """The answer to an event whose handling failed, recorded in the ledger and counted."""
    result = Result(
        outcome="failed",
        kind=kind,
        node=node,
        instance_id=instance_id,
        event_id=event_id,
        reason=f"{what_failed(err)}: {err}",
    )
    logger.error("failed", extra={"kind": kind, "event_id": event_id, "node": node, "error": str(err)})
    count_event(kind, "failed")
    if ledger is not None and event_id:
        entry = {"outcome": "failed", "kind": kind, "node": node or "", "reason": result.reason, "caller": caller}
        try:
            ledger.record(event_id, entry)
        except CloudError as ledger_err:  # the ledger is a record, not the failure being reported
            logger.warning("failure not recorded in the ledger", extra={"error": str(ledger_err)})
    return result


def failed_notice(notice: Notice, deps: Deps, err: GpuwardenError) -> Result:
    """The failed result of one notice, recorded in its run's ledger under the notice's event."""
    return failed_result(
        notice.kind.value,
        err,
        event_id=notice.event_id,
        node=notice.node_name,
        instance_id=notice.instance_id,
        ledger=deps.ledger,
        caller=deps.caller,
    )
