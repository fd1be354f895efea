"""Beside Karpenter's own interruption handling (docs/cluster.md#beside-karpenter): the hooks an
involuntary notice adds to the one disruption sequence.

- `protect_pod` (a `prepare_pod` hook): a pod asked to checkpoint is marked
  `karpenter.sh/do-not-disrupt: "true"` in the very write that asks it (never asked unmarked), so
  Karpenter's drain passes it over. A pod that already
  carries the annotation keeps it unchanged; a mark gpuwarden adds is recorded on the pod
  (`gpuwarden.io/do-not-disrupt-added: <event id>`), so a release takes back only its own and the
  voluntary guards do not mistake gpuwarden's mark for the owner's. An eviction takes the pod
  and its annotations away together; a pod a PodDisruptionBudget keeps stays protected, because
  gpuwarden is still the one draining it.
- `left_to_karpenter` (a `replacement_guard`): no replacement for a node whose NodeClaim
  Karpenter is already deleting or disrupting (its `DisruptionReason` condition), or that carries
  `karpenter.sh/disrupted`: Karpenter replaces that capacity itself. It reads the NodeClaim right
  before the launch, so the mark can carry the replacement's claim (`claim_with_mark`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.decide import stale_warning
from gpuwarden.domain.views import DO_NOT_DISRUPT, KARPENTER_DISRUPTED_TAINT, NodeView, PodView
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.hooks import Delivery, Disruption
from gpuwarden.services.engine.result import LEFT_TO_KARPENTER
from gpuwarden.services.engine.writes import Patch, annotate, update_pod

if TYPE_CHECKING:
    from gpuwarden.domain.ports import KubePort

#: The NodeClaim condition Karpenter's disruption sets while it replaces the node (karpenter.sh/v1).
DISRUPTION_REASON = "DisruptionReason"


def protect_pod(recorder: Recorder, pod: PodView) -> Mapping[str, str | None]:
    """The `prepare_pod` hook: the do-not-disrupt mark written with the checkpoint request itself, so
    Karpenter never sees a pod asked to checkpoint without it. A pod that already carries the
    annotation (the owner's, whatever its value) keeps it unchanged."""
    if DO_NOT_DISRUPT in pod.annotations or pod.terminating:
        return {}
    return {DO_NOT_DISRUPT: "true", ann.DO_NOT_DISRUPT_ADDED: recorder.event_id}


def release_pod_patch(pod: PodView) -> Patch | None:
    """Take back a do-not-disrupt gpuwarden added (and only that)."""
    if ann.DO_NOT_DISRUPT_ADDED not in pod.annotations:
        return None
    return annotate({DO_NOT_DISRUPT: None, ann.DO_NOT_DISRUPT_ADDED: None})


def give_back_pods(kube: KubePort, node: str) -> list[str]:
    """When gpuwarden gives a node back: every do-not-disrupt it added there is taken back (RV-checked);
    an owner's own annotation is never touched. Answers the pods written."""
    written = [update_pod(kube, pod, release_pod_patch) for pod in kube.list_pods_on_node(node)]
    return [w.obj.key for w in written if w.written and w.obj is not None]


def karpenter_deleting(kube: KubePort, node: NodeView) -> str | None:
    """Why Karpenter is already replacing ``node`` (None: it is not)."""
    if node.karpenter_disrupted:
        return f"{LEFT_TO_KARPENTER}: node {node.name} is tainted {KARPENTER_DISRUPTED_TAINT}"
    if not node.nodepool:
        return None
    # the node's owner reference names its NodeClaim: one read, not a list of every claim
    claims = [kube.get_nodeclaim(node.nodeclaim)] if node.nodeclaim else kube.list_nodeclaims()
    for claim in claims:
        if claim is None:
            continue  # gone already: Karpenter is not deleting it any more
        meta, status = claim.get("metadata") or {}, claim.get("status") or {}
        mine = (
            meta.get("name") == node.nodeclaim
            or status.get("nodeName") == node.name
            or (node.provider_id and status.get("providerID") == node.provider_id)
        )
        if not mine:
            continue
        if meta.get("deletionTimestamp"):
            return f"{LEFT_TO_KARPENTER}: Karpenter is deleting NodeClaim {meta.get('name')}"
        reason = _disruption_reason(status)
        if reason is not None:
            return f"{LEFT_TO_KARPENTER}: Karpenter is disrupting NodeClaim {meta.get('name')} ({reason})"
    return None


def _disruption_reason(status: Mapping[str, object]) -> str | None:
    """The NodeClaim's `DisruptionReason` condition, when True: Karpenter's disruption queue sets it
    right after it taints the node `karpenter.sh/disrupted`, before it launches its replacements
    (kubernetes-sigs/karpenter ``pkg/controllers/disruption/queue.go``, ``markDisrupted``)."""
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == DISRUPTION_REASON and cond.get("status") == "True":
            return str(cond.get("reason") or DISRUPTION_REASON)
    return None


def left_to_karpenter(d: Disruption) -> str | None:
    """The replacement guard: the node as the mark left it, then its NodeClaim. A taint Karpenter
    adds after the mark is seen by the replacement's claim, which writes on the node as it is now
    (`replace._claim`)."""
    return karpenter_deleting(d.deps.kube, d.node)


#: The delivery of involuntary notices (Spot, capacity-reservation and Capacity Block warnings,
#: planned drains before a loss): every pod asked to checkpoint is protected from Karpenter's drain
#: first, Karpenter's replacement is not doubled, and the drain workflow starts at once.
INVOLUNTARY = Delivery(
    prepare_pod=protect_pod, replacement_guard=left_to_karpenter, claim_with_mark=True, hand_off_at_once=True
)


def not_stale(d: Disruption) -> str | None:
    """The guard of a warning that a node is about to be lost: a warning more than 10 min past its
    own deadline for a node still there is a replay (`decide.stale_warning`); nothing is written."""
    return stale_warning(d.node, d.notice.deadline, d.deps.clock())
