"""The karpenter-expiry kind's policy section, `karpenter_expiry` (docs/policy.md, docs/cluster.md
"Expiry"): declared by the kind's spec (`KindSpec.policy`), read with
`domain.policy.section_of(policy, KarpenterExpiryPolicy)`."""

from __future__ import annotations

from pydantic import Field

from gpuwarden.domain.policy import Frozen
from gpuwarden.kinds.spec import PolicySection


class KarpenterExpiryPolicy(Frozen):
    """The karpenter-expiry kind (docs/cluster.md, "Expiry")."""

    #: switch: plan a drain before Karpenter expires a node (spec.expireAfter)
    enabled: bool = True
    #: Start the drain this long before Karpenter expires the node.
    lead_minutes: int = Field(default=30, ge=1, le=24 * 60)


SECTION = PolicySection("karpenter_expiry", KarpenterExpiryPolicy)
