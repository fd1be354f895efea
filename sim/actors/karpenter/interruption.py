"""The interruption controller (karpenter-provider-aws ``pkg/controllers/interruption``): Spot,
scheduled-change, state-change and capacity-reservation messages are "cordon and drain" (the
NodeClaim is deleted at once); instance/system status messages are "forceful" (the termination
timestamp is set to now first); a Spot message marks its offering unavailable for later launches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sim.actors.karpenter.cluster import Cluster
from sim.actors.karpenter.messages import CORDON_AND_DRAIN, FORCEFUL, MessageKind
from sim.actors.karpenter.objects import NODECLAIMS, TERMINATION_TIMESTAMP, Obj, instance_id, meta_of
from sim.clock import rfc3339


@dataclass
class InterruptionController:
    cluster: Cluster
    #: the provisioner's "these pods need a home" (a deleting node's pods go into its batch at once)
    displaced: Callable[[Obj, datetime], None]

    def deliver(self, instance: str, kind: MessageKind, now: datetime) -> None:
        for claim in self.cluster.items(NODECLAIMS):
            if instance_id(str((claim.get("status") or {}).get("providerID", ""))) == instance:
                self.interrupt(claim, kind, now)

    def interrupt(self, claim: Obj, kind: MessageKind, now: datetime) -> None:
        name = claim["metadata"]["name"]
        labels = meta_of(claim).get("labels") or {}
        if kind == MessageKind.SPOT_INTERRUPTED:
            offering = (
                labels.get("node.kubernetes.io/instance-type", ""),
                labels.get("topology.kubernetes.io/zone", ""),
            )
            if all(offering):
                self.cluster.unavailable.add((*offering, "spot"))
        if kind in FORCEFUL and TERMINATION_TIMESTAMP not in (meta_of(claim).get("annotations") or {}):
            self.cluster.patch(
                f"{NODECLAIMS}/{name}", {"metadata": {"annotations": {TERMINATION_TIMESTAMP: rfc3339(now)}}}
            )
        acts = kind in CORDON_AND_DRAIN or kind in FORCEFUL
        if acts and not meta_of(claim).get("deletionTimestamp") and self.cluster.delete(f"{NODECLAIMS}/{name}"):
            self.cluster.record(now, "nodeclaim-deleted", name, kind.value)
            self.displaced(claim, now)
