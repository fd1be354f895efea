"""The Capacity Block kinds' policy section, `capacity_blocks` (docs/policy.md): declared by the
planning kind's spec (`KindSpec.policy`, capacity-block-plan: the expiry warning itself, like a
Spot warning, has no settings), read with `domain.policy.section_of(policy, CapacityBlocksPolicy)`."""

from __future__ import annotations

from pydantic import Field

from gpuwarden.domain.policy import Frozen
from gpuwarden.kinds.spec import PolicySection


class CapacityBlocksPolicy(Frozen):
    #: switch: Capacity Block planning (a delivered block's drain planned before it ends); the
    #: block-expiry warning itself, like a Spot warning, is always handled
    enabled: bool = True
    #: Ask for checkpoints (start the drain) this long before EC2 starts terminating a Capacity
    #: Block's instances (30 min before the block ends).
    lead_minutes: int = Field(default=30, ge=1, le=24 * 60)


SECTION = PolicySection("capacity_blocks", CapacityBlocksPolicy)
