"""gpuwarden's typed vocabulary: what it did (`ActionType`), how a drain ended (`DrainOutcome`),
what an eviction answered (`EvictionResult`), and the metric names.

Each action type carries its Kubernetes Event reason on the node (None: no Event), whether
that Event is a Warning, and the metric it counts. Decisions read these types, never the
words of a message; the JSON shows their string values (docs: results).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Metric(StrEnum):
    EVENTS = "Events"
    NODES_CORDONED = "NodesCordoned"
    CHECKPOINT_REQUESTS = "CheckpointRequests"
    CHECKPOINT_ACKS = "CheckpointAcks"
    CHECKPOINT_TIMEOUTS = "CheckpointTimeouts"
    PODS_EVICTED = "PodsEvicted"
    PODS_DELETED = "PodsDeleted"
    EVICTIONS_BLOCKED = "EvictionsBlocked"
    REPLACEMENTS = "ReplacementsLaunched"
    DRAIN_SECONDS = "DrainSeconds"
    SECONDS_LEFT_AT_DRAIN_END = "SecondsLeftAtDrainEnd"
    DRAINS_PAST_DEADLINE = "DrainsPastDeadline"
    NODES_LOST_UNDRAINED = "NodesLostUndrained"
    NODEPOOL_WRITES_FAILED = "NodePoolWritesFailed"
    #: nodes the GPU-health breaker left untouched (docs/gpu-signals.md)
    GPU_HEALTH_HELD_BACK = "GpuHealthHeldBack"
    #: GPU-health scans run, and failing conditions they found
    GPU_HEALTH_SCANS = "GpuHealthScans"
    GPU_HEALTH_UNHEALTHY = "GpuHealthUnhealthyNodes"
    #: GPU-hours an owner keeps idle on a node gpu-idle could not reclaim (its pods would come back)
    IDLE_GPU_HOURS_HELD = "IdleGpuHoursHeld"


class ActionType(StrEnum):
    """One step gpuwarden took (or chose not to), as the result's ``actions[].type`` shows it."""

    CORDON = "cordon"
    CHECKPOINT_REQUESTED = "checkpoint-requested"
    SIGNAL = "signal"
    CHECKPOINT_DELIVERED = "checkpoint-delivered"
    CHECKPOINT_ACK = "checkpoint-ack"
    CHECKPOINT_FAILED = "checkpoint-failed"
    EVICT = "evict"
    DELETE = "delete"
    EVICTION_BLOCKED = "eviction-blocked"
    REPLACEMENT = "replacement"
    REPLACEMENT_SKIPPED = "replacement-skipped"
    REPLACEMENT_FAILED = "replacement-failed"
    DRAIN_COMPLETE = "drain-complete"
    DRAIN_BLOCKED = "drain-blocked"
    NODE_GONE = "node-gone"
    #: a pod marked `karpenter.sh/do-not-disrupt` before it was asked to checkpoint (beside Karpenter)
    DO_NOT_DISRUPT = "do-not-disrupt"
    #: A pod's gang annotations cannot be read (docs/training-jobs.md): it is a gang of one.
    GANG_INVALID = "checkpoint-gang-invalid"
    INSTANCE_LOST = "instance-lost"
    NODE_LOST_UNDRAINED = "node-lost-undrained"
    REFUSED = "refused"
    #: gpu-idle refused a node because an owner's pod would come straight back: who holds its idle GPUs
    IDLE_GPUS_HELD = "idle-gpus-held"
    SUPERSEDED = "superseded"
    MAINTENANCE_PLANNED = "maintenance-planned"
    CAPACITY_BLOCK_PLANNED = "capacity-block-planned"
    #: a node's drain planned before Karpenter expires it (spec.expireAfter)
    EXPIRY_PLANNED = "expiry-planned"
    CAPACITY_BLOCKS_UNKNOWN = "capacity-blocks-unknown"
    SCHEDULED = "scheduled"
    SCHEDULE_SKIPPED = "schedule-skipped"
    RETIRE = "retire"
    RETIRE_SKIPPED = "retire-skipped"
    RELEASE = "release"
    #: a replacement's karpenter.sh/do-not-disrupt hold taken back (its pods run there, or its time passed)
    HOLD_RELEASED = "hold-released"
    #: `gpuwarden release`: a pod's do-not-disrupt (gpuwarden's) and checkpoint request taken back
    POD_RELEASED = "pod-released"
    NODEPOOL_SET = "nodepool-set"
    NODEPOOL_DRIFT = "nodepool-drift"
    NODEPOOL_SKIPPED = "nodepool-skipped"
    NODEPOOL_FAILED = "nodepool-failed"
    #: the GPU-health breaker kept the node untouched (its pool is at gpu_health.max_unhealthy_percent)
    HELD_BACK = "held-back"
    #: after the mark, the run's own work failed for a reason retrying may fix: what was left of it
    #: went to the drain workflow (docs/reliability.md#after-the-mark)
    HANDED_ON = "handed-on"

    @property
    def event_reason(self) -> str | None:
        """The reason of the Kubernetes Event posted on the node (None: none is posted)."""
        return _SPECS.get(self, _QUIET).event_reason

    @property
    def warning(self) -> bool:
        return _SPECS.get(self, _QUIET).warning

    @property
    def metric(self) -> Metric | None:
        return _SPECS.get(self, _QUIET).metric


@dataclass(frozen=True)
class _Spec:
    event_reason: str | None = None
    warning: bool = False
    metric: Metric | None = None


_QUIET = _Spec()
_SPECS: dict[ActionType, _Spec] = {
    ActionType.CORDON: _Spec("GpuwardenCordoned", metric=Metric.NODES_CORDONED),
    ActionType.CHECKPOINT_REQUESTED: _Spec("CheckpointRequested", metric=Metric.CHECKPOINT_REQUESTS),
    ActionType.CHECKPOINT_ACK: _Spec("CheckpointCompleted", metric=Metric.CHECKPOINT_ACKS),
    ActionType.CHECKPOINT_FAILED: _Spec("CheckpointFailed", warning=True),
    ActionType.EVICT: _Spec("PodEvicted", metric=Metric.PODS_EVICTED),
    ActionType.DELETE: _Spec("PodDeleted", metric=Metric.PODS_DELETED),
    ActionType.EVICTION_BLOCKED: _Spec(metric=Metric.EVICTIONS_BLOCKED),
    ActionType.REPLACEMENT: _Spec("ReplacementLaunched", metric=Metric.REPLACEMENTS),
    ActionType.REPLACEMENT_FAILED: _Spec("ReplacementFailed", warning=True),
    ActionType.DRAIN_COMPLETE: _Spec("DrainCompleted"),
    ActionType.DRAIN_BLOCKED: _Spec("DrainBlocked", warning=True),
    ActionType.NODE_LOST_UNDRAINED: _Spec("NodeLostUndrained", warning=True, metric=Metric.NODES_LOST_UNDRAINED),
    ActionType.REFUSED: _Spec("DisruptionRefused"),
    ActionType.IDLE_GPUS_HELD: _Spec("IdleGpusHeld"),
    ActionType.MAINTENANCE_PLANNED: _Spec("MaintenancePlanned"),
    ActionType.EXPIRY_PLANNED: _Spec("ExpiryPlanned"),
    ActionType.RETIRE: _Spec("NodeRetired"),
    ActionType.RELEASE: _Spec("GpuwardenUncordoned"),
    ActionType.RETIRE_SKIPPED: _Spec("NodeNotRetired"),
    ActionType.HELD_BACK: _Spec("GpuHealthHeldBack", warning=True, metric=Metric.GPU_HEALTH_HELD_BACK),
    ActionType.HANDED_ON: _Spec("DrainHandedOn", warning=True),
}


class DrainOutcome(StrEnum):
    """Where a drain stands (``drain.outcome`` in the result)."""

    DRAINING = "draining"
    DRAINED = "drained"
    DRAINED_LATE = "drained-late"
    #: the node was removed before the drain finished (Karpenter, or the instance went): not a failure
    GONE_EARLY = "gone-early"
    DEADLINE_PASSED = "deadline-passed"
    BLOCKED = "blocked"
    OVER_CAP = "over-cap"
    SUPERSEDED = "superseded"

    @property
    def drained(self) -> bool:
        return self in (DrainOutcome.DRAINED, DrainOutcome.DRAINED_LATE)


class EvictionResult(StrEnum):
    """What the Eviction API answered for one pod."""

    EVICTED = "evicted"
    #: a PodDisruptionBudget refused it now (429): retried, or deleted at the deadline
    BLOCKED = "blocked"
    #: 404, or 409 (the name now belongs to another pod): nothing left to do
    GONE = "gone"
