"""The names gpuwarden writes and reads on Kubernetes objects (docs/cluster.md)."""

from __future__ import annotations

from datetime import UTC, datetime

PREFIX = "gpuwarden.io/"

# Node
TAINT_KEY = PREFIX + "disruption"
EVENT_ID = PREFIX + "event-id"
KIND = PREFIX + "kind"
DEADLINE = PREFIX + "deadline"
#: On an interrupted node: its replacement (``nodeclaim/<name>``, or what an Auto Scaling group or a
#: Fleet launched). A NodeClaim's name is written with the mark, before the create: one not in the
#: cluster may never have been created (docs/cluster.md, "Replacement capacity").
REPLACEMENT = PREFIX + "replacement"
#: Set when gpuwarden (not someone else) cordoned the node, so `uncordon` undoes only its own cordon.
CORDONED_BY_US = PREFIX + "cordoned"
DRAIN_STARTED = PREFIX + "drain-started"
DRAIN_COMPLETED = PREFIX + "drain-completed"
#: The state-change events (comma-separated, the last few) that reported the instance stopping:
#: a re-delivery of one of them reports nothing new.
LOST_EVENT = PREFIX + "lost-event-ids"
#: When gpuwarden took a gpu-idle slot for the node (RFC 3339, microseconds): orders the racers.
CLAIMED_AT = PREFIX + "claimed-at"
#: On a replacement NodeClaim gpuwarden launched: until when (RFC 3339) it holds the claim and its
#: node with `karpenter.sh/do-not-disrupt` (docs/cluster.md, "Replacement capacity").
HOLD_UNTIL = PREFIX + "hold-until"
#: On an interrupted node: the replacement NodeClaims that failed to launch so far, each
#: ``<NodePool>/<NodeClaim>`` (comma-separated): the next attempt leaves those NodePools out.
REPLACEMENT_FAILED = PREFIX + "replacement-failed"
#: On an interrupted node: the NodePool of its replacement NodeClaim where that is not the node's own
#: (a later tier's), so a round that finds the claim deleted knows which pool failed.
REPLACEMENT_POOL = PREFIX + "replacement-pool"
#: On a replacement NodeClaim: the node it replaces.
REPLACES = PREFIX + "replaces"
#: On a replacement NodeClaim: the event it was launched for. Not `EVENT_ID`, which on a node means
#: gpuwarden holds the node: Karpenter's registration copies a claim's annotations onto its node
#: (docs/cluster.md, "Replacement capacity").
LAUNCHED_FOR = PREFIX + "launched-for"
#: What a disruption writes on its node, and what giving the node back removes.
DISRUPTION_MARKS = (EVENT_ID, KIND, DEADLINE, CORDONED_BY_US, DRAIN_STARTED, DRAIN_COMPLETED, CLAIMED_AT)

# Pod (set by the workload's owner)
CHECKPOINT = PREFIX + "checkpoint"
CHECKPOINT_CONTAINER = PREFIX + "checkpoint-container"
CHECKPOINT_TIMEOUT = PREFIX + "checkpoint-timeout-seconds"
# Pod (set by gpuwarden / the workload)
CHECKPOINT_REQUESTED = PREFIX + "checkpoint-requested"
CHECKPOINT_DONE = PREFIX + "checkpoint-done"
#: Which event asked for the checkpoint: a re-delivery does not ask again.
CHECKPOINT_EVENT = PREFIX + "checkpoint-event-id"
#: Set by gpuwarden when the signal / command / POST could not be delivered or failed.
CHECKPOINT_FAILED = PREFIX + "checkpoint-failed"
#: Set beside `karpenter.sh/do-not-disrupt` when gpuwarden added it for an involuntary notice (the
#: value: that event), so a release takes back only its own (docs/cluster.md#beside-karpenter).
DO_NOT_DISRUPT_ADDED = PREFIX + "do-not-disrupt-added"


def rfc3339(at: datetime) -> str:
    """UTC, second precision, 'Z' suffix: the form kubectl shows and users type."""
    return at.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


# NodePool (budget windows): the budgets and GPU limit the windows replaced, restored exactly at close
SAVED_BUDGETS = PREFIX + "saved-budgets"

# Node (scheduled maintenance): the plan held until its window opens (a re-delivery finds it here)
MAINTENANCE_PLAN = PREFIX + "maintenance-plan"  # "<window>@<start RFC 3339>"
MAINTENANCE_PLAN_ID = PREFIX + "maintenance-plan-id"
MAINTENANCE_EVENT_ID = PREFIX + "maintenance-event-id"
MAINTENANCE_DEADLINE = PREFIX + "maintenance-deadline"
