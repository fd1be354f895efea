"""``karpenter-expiry`` (docs/cluster.md, "Expiry"): when Karpenter expires a node, and when gpuwarden
drains it first. Pure: the caller passes ``now``, the windows and the NodeClaim's view.

Karpenter v1 expires a NodeClaim at ``metadata.creationTimestamp + spec.expireAfter``
(kubernetes-sigs/karpenter v1.13.0, pkg/controllers/nodeclaim/expiration/controller.go,
``Reconcile``: ``expirationTime := nodeClaim.CreationTimestamp.Add(*nodeClaim.Spec.ExpireAfter.Duration)``),
forcefully: it deletes the NodeClaim, and no budget and no do-not-disrupt holds it. ``Never``
(pkg/apis/v1/duration.go) and an absent ``expireAfter`` mean no expiry. gpuwarden plans the drain
as it plans maintenance: in the latest allowed window before ``expiry - karpenter_expiry.lead_minutes``
(``windows.latest_allowed_window_before``, the planner the maintenance and Capacity Block plans
use), else at that time; once that time has come the expiry is no longer voluntary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuwarden.domain.annotations import rfc3339
from gpuwarden.domain.nodepools import NEVER, NodeClaimView, parse_go_duration
from gpuwarden.domain.protections import karpenter_forces_at
from gpuwarden.domain.windows import Window, latest_allowed_window_before


@dataclass(frozen=True)
class Expiry:
    """When Karpenter expires the NodeClaim's node (None: never), and why in words."""

    claim: str
    at: datetime | None
    reason: str
    #: The NodeClaim's ``spec.terminationGracePeriod`` (None: none set, or unreadable): how long
    #: Karpenter's termination waits for do-not-disrupt and PDB-blocked pods after the expiry
    #: (`domain.protections`).
    termination_grace: timedelta | None = None

    @property
    def karpenter_forces_at(self) -> datetime | None:
        """When Karpenter forces the node's remaining pods: expiry + terminationGracePeriod."""
        return None if self.at is None else karpenter_forces_at(self.at, self.termination_grace)


def expiry_of(claim: NodeClaimView) -> Expiry:
    """``creationTimestamp + expireAfter``; ``Never``, absent, or unreadable: no expiry, with why."""
    text = claim.expire_after
    if text is None or text == NEVER:
        return Expiry(claim.name, None, f"NodeClaim {claim.name}: expireAfter {text or 'absent'}: never expires")
    if claim.created is None:
        return Expiry(claim.name, None, f"NodeClaim {claim.name} has no creationTimestamp: no expiry known")
    try:
        after = parse_go_duration(text)
    except ValueError as err:
        return Expiry(claim.name, None, f"NodeClaim {claim.name}: {err}: Karpenter cannot read it either")
    at = claim.created + after
    grace = _grace(claim.termination_grace)
    return Expiry(claim.name, at, f"NodeClaim {claim.name} expires at {rfc3339(at)} (created + {text})", grace)


def _grace(text: str | None) -> timedelta | None:
    """A terminationGracePeriod Karpenter cannot read is read as none: gpuwarden then never forces."""
    try:
        return None if text is None else parse_go_duration(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class ExpiryPlan:
    """When to start draining a node before Karpenter expires it.

    ``latest``: expiry - lead, the latest start; from then on the expiry is involuntary
    (``voluntary`` False: no budget or window holds it). ``drain_at``: the planned start (in
    ``window``, or ``latest``); ``due``: it has come."""

    expiry: datetime
    latest: datetime
    drain_at: datetime
    window: str | None
    due: bool
    voluntary: bool
    reason: str


def plan_expiry(
    expiry: datetime,
    lead: timedelta,
    windows: Sequence[Window],
    now: datetime,
    nodepool: str | None,
    needed: timedelta,
) -> ExpiryPlan:
    """The drain's start for a node Karpenter expires at ``expiry``: in the latest window
    occurrence before ``expiry - lead`` that leaves ``needed`` (the drain allowance), else at
    ``expiry - lead``; at once when that has come."""
    latest = expiry - lead
    minutes = int(lead.total_seconds() // 60)
    if now >= latest:
        reason = (
            f"Karpenter expires the node at {rfc3339(expiry)}; {minutes} min before it ({rfc3339(latest)}) has "
            "come: drain now, checkpoints first"
        )
        return ExpiryPlan(expiry, latest, now, None, True, False, reason)
    found = None
    if windows and latest - now >= needed:
        found = latest_allowed_window_before(windows, now, latest, nodepool, needed)
    if found is None or found.usable is None:
        reason = f"drain at {rfc3339(latest)}, {minutes} min before Karpenter expires the node at {rfc3339(expiry)}" + (
            "" if not windows else " (no allowed window fits before then)"
        )
        return ExpiryPlan(expiry, latest, latest, None, False, True, reason)
    start = max(found.usable.start, now)
    reason = (
        f"drain in window {found.name!r} from {rfc3339(start)} {found.describe()}, before Karpenter expires the "
        f"node at {rfc3339(expiry)} ({minutes} min lead)"
    )
    return ExpiryPlan(expiry, latest, start, found.name, start <= now, True, reason)
