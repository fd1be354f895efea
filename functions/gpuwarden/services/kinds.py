"""Every kind's hooks into the one disruption sequence (`services.pipeline`), by kind.

The drain workflow's rounds find the kind's `settle` here, so the generic drain knows no
use case. A new kind is one entry (and, when it differs, one `KindHooks` in its own module).
"""

from __future__ import annotations

from gpuwarden.domain.notice import Kind
from gpuwarden.services import gpu_idle, karpenter, maintenance, runbook
from gpuwarden.services.context import Recorder
from gpuwarden.services.drain import DrainState
from gpuwarden.services.pipeline import URGENT, KindHooks, round_of

HOOKS: dict[Kind, KindHooks] = {
    Kind.SPOT_INTERRUPTION: karpenter.INVOLUNTARY,
    Kind.REBALANCE: karpenter.REBALANCE,
    Kind.INSTANCE_STOPPING: URGENT,
    Kind.CAPACITY_RESERVATION_INTERRUPTION: karpenter.INVOLUNTARY,
    Kind.CAPACITY_BLOCK_EXPIRY: karpenter.INVOLUNTARY,
    # the planned drain: involuntary, deadline at the start of termination
    Kind.CAPACITY_BLOCK_PLAN: karpenter.INVOLUNTARY,
    Kind.SCHEDULED_MAINTENANCE: maintenance.HOOKS,
    Kind.GPU_IDLE: gpu_idle.HOOKS,
    Kind.MANUAL: runbook.HOOKS,
}


def hooks_for(kind: Kind) -> KindHooks:
    """A kind without an entry gets the defaults of its class; an involuntary one is protected
    beside Karpenter, as the Spot and capacity warnings are."""
    return HOOKS.get(kind, URGENT if kind.voluntary else karpenter.INVOLUNTARY)


def drain_round(recorder: Recorder, state: DrainState) -> DrainState:
    """One round of the drain workflow, settled by its kind."""
    return round_of(recorder, state, hooks_for(state.kind))
