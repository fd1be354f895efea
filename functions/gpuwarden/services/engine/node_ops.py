"""Find the node, mark it (cordon + taint + annotations), idempotently and race-safe."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from dateutil.parser import isoparse

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.budgets import BudgetAnswer, VoluntaryVerdict, budget_answer, voluntary_verdict
from gpuwarden.domain.errors import CloudError, KubeError
from gpuwarden.domain.instances import InstanceIdentity, Owner
from gpuwarden.domain.nodepools import nodeclaim_from_json, nodepool_from_json
from gpuwarden.domain.notice import Kind, Notice
from gpuwarden.domain.ports import CloudPort, KubePort
from gpuwarden.domain.replacement import claimable
from gpuwarden.domain.views import NODEPOOL_LABEL, NodeView, PodView, Taint
from gpuwarden.domain.windows import Allowance, Window, voluntary_allowance
from gpuwarden.observability import logger
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.writes import Patch, release_node, update_node

_INSTANCE_CACHE: dict[str, str] = {}


def find_node(
    kube: KubePort, cloud: CloudPort, instance_id: str | None, node_name: str | None, cluster: str | None = None
) -> NodeView | None:
    """The node a notice is about (docs/architecture.md, "Finding the node"): by name when the
    event names one; else the node this warm process found for the instance before; else EC2's
    answer for the instance: an instance whose tags name only other clusters than ``cluster`` is
    not ours (no Kubernetes call at all); otherwise the node named by its private DNS name (EKS's
    node name), if its providerID does not name another instance; else one paginated LIST of the
    nodes, by providerID (a node named otherwise, or EC2 not answering)."""
    if node_name:
        return kube.get_node(node_name)
    if not instance_id:
        return None
    cached = _INSTANCE_CACHE.get(instance_id)
    node = kube.get_node(cached) if cached else None
    if node is not None and node.instance_id == instance_id:
        return node
    identity = _identity(cloud, instance_id)
    if identity is not None and cluster and identity.owner(cluster) is Owner.OTHER:
        logger.info(
            "instance of another cluster", extra={"instance": instance_id, "clusters": sorted(identity.clusters)}
        )
        return None
    node = kube.get_node(identity.private_dns_name) if identity and identity.private_dns_name else None
    if node is not None and node.instance_id in (None, instance_id):
        if node.instance_id:
            _INSTANCE_CACHE[instance_id] = node.name
        return node
    return _listed(kube, instance_id)


def _listed(kube: KubePort, instance_id: str) -> NodeView | None:
    """The node whose providerID names the instance, from one paginated LIST (every node's
    instance remembered on the way)."""
    found = None
    for node in kube.list_nodes():
        if node.instance_id:
            _INSTANCE_CACHE[node.instance_id] = node.name
        if node.instance_id == instance_id:
            found = node
    return found


def _identity(cloud: CloudPort, instance_id: str) -> InstanceIdentity | None:
    """EC2's answer for the instance; None when it knows none or cannot be asked (then the nodes'
    providerIDs decide: a notice is never dropped because EC2 did not answer)."""
    try:
        return cloud.instance_identity(instance_id)
    except CloudError as err:
        logger.warning("EC2 not asked, the nodes are listed", extra={"instance": instance_id, "error": str(err)})
        return None


def pods_on(kube: KubePort, node: str) -> list[PodView]:
    """The pods still on ``node``: listed by its name, without one that has left it since (a pod
    the list answers with another node's name)."""
    return [p for p in kube.list_pods_on_node(node) if p.node_name == node]


def scanned_nodes(deps: Deps) -> list[NodeView]:
    """The scan's one LIST of the cluster's nodes, narrowed only where the policy says
    (``gpu_health.node_selector``); every kind's part of the scan reads it. None listed when the
    scan is off (``gpu_health.enabled: false``)."""
    policy = deps.policy.gpu_health
    return deps.kube.list_nodes(policy.node_selector or None) if policy.enabled else []


def not_ours(notice: Notice, cluster: str) -> str:
    return f"{notice.target} is not a node of cluster {cluster}"


def our_taint(kind: Kind) -> Taint:
    return Taint(key=ann.TAINT_KEY, value=kind.value, effect="NoSchedule")


def is_marked(node: NodeView, notice: Notice) -> bool:
    return (
        node.annotations.get(ann.EVENT_ID) == notice.event_id
        and node.unschedulable
        and our_taint(notice.kind) in node.taints
    )


_KNOWN = frozenset(kind.value for kind in Kind)


def supersedes(new: Kind, current: str | None, voluntary: Collection[str], over: bool = False) -> bool:
    """An involuntary notice takes over a node a voluntary notice holds; nothing takes over an
    involuntary one (a late redelivery of an older warning must not take the node back) while its
    work is under way. ``over``: the current notice's drain completed and its deadline has passed
    (`_over`), so what it left on the node (pods that never move for it, such as do-not-disrupt pods
    Karpenter's expiry leaves) faces the new loss unasked unless the new notice takes over
    (docs/cluster.md, "A finished notice and the next loss"). A kind this version does not know is
    taken over. ``voluntary``: the voluntary kinds (`Deps`)."""
    if current is None:
        return True
    if new in voluntary:
        return False
    return current in voluntary or current not in _KNOWN or over


def _over(node: NodeView, notice: Notice) -> bool:
    """The node's current notice is done with it: its drain completed and its deadline came before
    ``notice`` did (a notice without a deadline is never over)."""
    notes = node.annotations
    deadline = notes.get(ann.DEADLINE)
    if not notes.get(ann.DRAIN_COMPLETED) or not deadline:
        return False
    try:
        return isoparse(deadline) <= notice.event_time
    except ValueError:
        return False  # unreadable: the current notice holds, as before


@dataclass(frozen=True)
class MarkResult:
    node: NodeView
    changed: bool
    #: The node is held by another, involuntary notice: this one must not act on it.
    held_by: str | None = None


def _mark_patch(
    node: NodeView, notice: Notice, extra: Mapping[str, str] | None, claim: str | None, voluntary: Collection[str]
) -> Patch | None:
    """The mark for ``notice`` on ``node`` as it is now; None when it is marked already or
    another notice holds it (see `supersedes`). ``claim``: the replacement's claim the mark also
    writes while the node is `claimable`."""
    if is_marked(node, notice):
        return None
    if node.annotations.get(ann.EVENT_ID) != notice.event_id and not supersedes(
        notice.kind, node.annotations.get(ann.KIND), voluntary, _over(node, notice)
    ):
        return None
    taints = [t.as_dict() for t in node.taints if t.key != ann.TAINT_KEY]
    taints.append(our_taint(notice.kind).as_dict())
    annotations: dict[str, str | None] = {
        ann.EVENT_ID: notice.event_id,
        ann.KIND: notice.kind.value,
        ann.DEADLINE: ann.rfc3339(notice.deadline) if notice.deadline else None,
    }
    if node.annotations.get(ann.EVENT_ID) != notice.event_id:
        # a new event starts a new drain: an earlier event's completion no longer holds
        annotations[ann.DRAIN_COMPLETED] = None
    annotations.update(extra or {})
    if claim is not None and claimable(node):
        annotations[ann.REPLACEMENT] = claim
    if not node.unschedulable:
        annotations[ann.CORDONED_BY_US] = "true"
    return {"metadata": {"annotations": annotations}, "spec": {"unschedulable": True, "taints": taints}}


def mark_node(
    kube: KubePort,
    node: NodeView,
    notice: Notice,
    *,
    voluntary: Collection[str],
    extra: Mapping[str, str] | None = None,
    claim: str | None = None,
) -> MarkResult:
    """Cordon, taint `gpuwarden.io/disruption=<kind>:NoSchedule`, annotate (plus ``extra`` and the
    replacement's ``claim``). One write, RV-checked. ``voluntary``: the voluntary kinds (`supersedes`)."""
    marked = update_node(kube, node, lambda current: _mark_patch(current, notice, extra, claim, voluntary))
    if marked.obj is None:
        raise KubeError(f"node {node.name} disappeared while being cordoned", status=404)
    current = marked.obj
    if marked.written or is_marked(current, notice):
        return MarkResult(current, changed=marked.written)
    held = f"{current.annotations.get(ann.KIND)} ({current.annotations.get(ann.EVENT_ID)})"
    return MarkResult(current, changed=False, held_by=held)


def voluntary_in_progress(
    deps: Deps, nodepool: str | None, *, exclude: str | None = None, covered_by: Window | None = None
) -> int:
    """Voluntary disruptions under way: what `voluntary_allowance(in_progress=…)` takes.

    A node counts while gpuwarden holds it for a voluntary kind (annotation `gpuwarden.io/kind`)
    and it is not drained yet (no `gpuwarden.io/drain-completed`); a node that is gone no longer
    counts. Counted in ``nodepool`` (None: nodes outside Karpenter), or, with ``covered_by``, in
    every NodePool that window covers. ``exclude``: the node being decided (a re-delivery for it
    must not count against itself).
    """
    count = 0
    for node in deps.kube.list_nodes():
        covered = covered_by.applies_to(node.nodepool) if covered_by is not None else node.nodepool == nodepool
        if node.name == exclude or not covered:
            continue
        kind = node.annotations.get(ann.KIND)
        if kind is not None and deps.is_voluntary(kind) and ann.DRAIN_COMPLETED not in node.annotations:
            count += 1
    return count


def window_allowance(deps: Deps, node: NodeView, now: datetime | None = None) -> Allowance:
    """What the policy's windows allow a voluntary disruption of ``node`` at ``now`` (default: the
    window clock) (docs/windows.md).

    The most restrictive open window decides; its ``max_disruptions`` counts the voluntary
    disruptions under way in everything it covers (all NodePools, or its ``nodepools``). Lists
    nodes only when an open window caps (a freeze, or no window open, needs no count).
    """
    windows, now = deps.policy.windows, now or deps.window_clock()
    first = voluntary_allowance(windows, now, node.nodepool, in_progress=0)
    if first.window is None or first.allowed == 0:
        return first
    deciding = next(w for w in windows if w.name == first.window)
    in_progress = voluntary_in_progress(deps, node.nodepool, exclude=node.name, covered_by=deciding)
    return voluntary_allowance(windows, now, node.nodepool, in_progress)


def budget_of(deps: Deps, node: NodeView, reason: str | None, now: datetime | None = None) -> BudgetAnswer | None:
    """What ``node``'s NodePool's disruption budgets allow a voluntary action of Karpenter
    ``reason`` now (docs/cluster.md, "The NodePool's own rules"): None for a node outside Karpenter,
    or one whose NodePool the cluster no longer has (no budget was written for it; Karpenter's own
    budget mapping walks only the NodePools that exist)."""
    if not node.nodepool:
        return None
    raw = deps.kube.get_nodepool(node.nodepool)
    if raw is None:
        return None
    members = deps.kube.list_nodes(f"{NODEPOOL_LABEL}={node.nodepool}")
    claims = [nodeclaim_from_json(c) for c in deps.kube.list_nodeclaims()]
    return budget_answer(nodepool_from_json(raw), node, members, reason, now or deps.window_clock(), claims)


def voluntary_verdict_of(
    deps: Deps, node: NodeView, pods: Callable[[], Sequence[PodView]], kind: str, now: datetime | None = None
) -> VoluntaryVerdict:
    """May a voluntary action of ``kind`` take ``node`` now: the policy's windows first
    (`window_allowance`), then the node's NodePool's budgets for the reason the kind counts as
    (`Deps.karpenter_reasons`, from the node's ``pods``, listed only for a kind that names a reason).
    The first refusal names who refused. The budgets are read only when the windows allow."""
    allowance = window_allowance(deps, node, now)
    if allowance.allowed is not None and allowance.allowed < 1:
        return voluntary_verdict(allowance, None)
    reason_of = deps.karpenter_reasons.get(kind)
    return voluntary_verdict(allowance, budget_of(deps, node, reason_of(pods()) if reason_of else None, now))


def give_back(recorder: Recorder, node: str, event_id: str, reason: str) -> None:
    """Release the node while ``event_id`` still holds it; recorded as `release`."""
    released = release_node(recorder.deps.kube, node, held_for=event_id)
    if released.written and released.obj is not None:
        recorder.add(ActionType.RELEASE, released.obj, reason=reason)
        recorder.flush()
