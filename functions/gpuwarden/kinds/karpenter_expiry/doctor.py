"""`doctor`'s `karpenter-expiry` check (docs/cluster.md, "Expiry"), in the kind's room: the GPU nodes
Karpenter expires within seven days, each with what gpuwarden plans for it (the reconcile's own plan,
`domain.expiry`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuwarden.domain.accelerators import is_accelerator_node
from gpuwarden.domain.annotations import rfc3339
from gpuwarden.domain.expiry import expiry_of, plan_expiry
from gpuwarden.domain.nodepools import claim_of, nodeclaim_from_json
from gpuwarden.domain.policy import Policy, section_of
from gpuwarden.domain.wording import count
from gpuwarden.kinds.karpenter_expiry.policy import KarpenterExpiryPolicy
from gpuwarden.services.doctor.facts import ClusterFacts, Finding, KindCheck, Severity

#: How far ahead the check looks.
HORIZON = timedelta(days=7)
_SHOWN = 5


def check_karpenter_expiry(facts: ClusterFacts, policy: Policy, now: datetime) -> Finding:
    claims = [nodeclaim_from_json(c) for c in facts.nodeclaims]
    soon = []
    section = section_of(policy, KarpenterExpiryPolicy)
    for node in facts.nodes:
        claim = claim_of(node, claims) if node.nodepool and is_accelerator_node(node) else None
        at = expiry_of(claim).at if claim is not None else None
        if at is None or at - now > HORIZON:
            continue
        lead = timedelta(minutes=section.lead_minutes)
        needed = timedelta(seconds=policy.drain.voluntary_limit_seconds)
        plan = plan_expiry(at, lead, policy.windows, now, node.nodepool, needed)
        planned = plan.reason if section.enabled else "nothing: karpenter_expiry.enabled is false"
        soon.append((at, f"{node.name} expires {rfc3339(at)}: {planned}"))
    if not soon:
        return Finding("karpenter-expiry", Severity.OK, "no GPU node expires (spec.expireAfter) within 7 days")
    shown = [line for _, line in sorted(soon)[:_SHOWN]]
    more = f"; and {len(soon) - _SHOWN} more" if len(soon) > _SHOWN else ""
    return Finding(
        "karpenter-expiry",
        Severity.WARN,
        f"{count(len(soon), 'GPU node')} {'expires' if len(soon) == 1 else 'expire'} within 7 days: "
        f"{'; '.join(shown)}{more}",
        "long training runs on them meet Karpenter's forceful expiry: make sure they checkpoint on request "
        "(gpuwarden.io/checkpoint), or raise the NodePool's spec.template.spec.expireAfter",
    )


#: The kind's doctor check (`KindSpec.doctor`).
DOCTOR = KindCheck("karpenter-expiry", check_karpenter_expiry)
