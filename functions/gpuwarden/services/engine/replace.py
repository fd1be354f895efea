"""Replacement capacity: never more than one per interrupted node (docs/cluster.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.accelerators import ResourceClaimView, replacement_demand, resource_claim_from_json
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import GpuwardenError, NoFittingReplacement, NotFound
from gpuwarden.domain.gangs import Gang
from gpuwarden.domain.nodepools import nodepool_from_json
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.policy import ReplacementPolicy
from gpuwarden.domain.ports import KubePort
from gpuwarden.domain.replacement import (
    ReplacementChoice,
    choose_replacement,
    claimable,
    nodeclaim_manifest,
    nodeclaim_name,
)
from gpuwarden.domain.tiers import tiers
from gpuwarden.domain.views import (
    DO_NOT_DISRUPT,
    KARPENTER_DISRUPTED_TAINT,
    NODEPOOL_LABEL,
    ZONE_LABEL,
    NodeView,
    PodView,
)
from gpuwarden.domain.volumes import ClaimView, VolumePin, VolumeView, pv_from_json, pvc_from_json, volume_pin
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.gangs import find_gangs
from gpuwarden.services.engine.result import KARPENTER, LEFT_TO_KARPENTER
from gpuwarden.services.engine.writes import Patch, annotate, update_node

PENDING = "pending:"
NODECLAIM = "nodeclaim/"


def gang_peers(gangs: Sequence[Gang], pods: Sequence[PodView]) -> list[PodView]:
    """The members of the moved pods' gangs (``gangs``: as the run's checkpoint step found them)."""
    keys = {p.key for p in pods}
    return [member for gang in gangs if any(m.key in keys for m in gang.members) for member in gang.members]


def peer_zones(kube: KubePort, node: NodeView, peers: Sequence[PodView]) -> list[str]:
    """The zone of each node the gang's other pods run on: the pod's own zone label where the API
    server copied it (PodTopologyLabels, beta in Kubernetes 1.35), else one LIST of the NodePool's
    nodes (the replacement comes from that NodePool)."""
    others = {p.node_name: p for p in peers if p.node_name and p.node_name != node.name and not p.finished}
    zones = {name: p.labels[ZONE_LABEL] for name, p in others.items() if p.labels.get(ZONE_LABEL)}
    if len(zones) < len(others) and node.nodepool:
        listed = kube.list_nodes(label_selector=f"{NODEPOOL_LABEL}={node.nodepool}")
        zones |= {n.name: n.zone for n in listed if n.zone and n.name in others and n.name not in zones}
    return [zones[name] for name in sorted(zones)]


def claims_and_pin(kube: KubePort, pods: Sequence[PodView]) -> tuple[list[ResourceClaimView], VolumePin]:
    """The pods' DRA ResourceClaims and the zone their bound volumes pin them to (docs/cluster.md,
    "Volumes"): read only for pods that name claims (one LIST per namespace, one GET per volume).
    Raises `NoFittingReplacement` when their volumes share no zone."""
    drafted = sorted({p.namespace for p in pods if p.resource_claims})
    claims = [resource_claim_from_json(c) for ns in drafted for c in kube.list_resource_claims(ns)]
    pvcs, pvs = volumes_of(kube, pods)
    return claims, volume_pin(pods, pvcs, pvs)


def volumes_of(kube: KubePort, pods: Sequence[PodView]) -> tuple[list[ClaimView], list[VolumeView]]:
    """The PersistentVolumeClaims the pods mount and the volumes they are bound to: one LIST per
    namespace that has such a pod, one GET per bound volume; nothing for pods without one."""
    mounted = sorted({p.namespace for p in pods if p.volume_claims})
    pvcs = [pvc_from_json(c) for ns in mounted for c in kube.list_pvcs(ns)]
    wanted = {(p.namespace, name) for p in pods for name in p.volume_claims}
    bound = sorted({c.volume for c in pvcs if c.volume and (c.namespace, c.name) in wanted})
    return pvcs, [pv_from_json(v) for name in bound if (v := kube.get_pv(name)) is not None]


def _tiered_manifest(
    recorder: Recorder, own: str, node: NodeView, pods: list[PodView], peers: Sequence[PodView], lost: bool
) -> tuple[dict[str, Any], str]:
    """The NodeClaim for the first NodePool that can take the replacement (docs/cluster.md, "Limits
    and tiers"): ``own`` first, then the others whose template admits the pods, by weight, each
    only where its ``spec.limits`` leave room. ``lost``: the node is being taken (an involuntary
    notice), so its capacity leaves its own pool's count. Raises `NoFittingReplacement` naming each
    pool's reason when none can."""
    kube = recorder.deps.kube
    listed = kube.list_nodepools()
    by_name = {str((p.get("metadata") or {}).get("name", "")): p for p in listed}
    claims, pin = claims_and_pin(kube, pods)
    requests = replacement_demand(pods, claims).requests
    pools = [nodepool_from_json(p) for p in listed]
    order = tiers(own, pools, pods, node, requests, zones=pin.zones or (), lost=lost)
    zones = peer_zones(kube, node, peers)
    refused = [c.refused for c in order.choices if c.refused]
    for name in order.usable:
        try:
            manifest, why = nodeclaim_manifest(
                by_name[name], node, pods, recorder.event_id, zones, claims=claims, volumes=pin
            )
        except NoFittingReplacement as err:
            refused.append(f"NodePool {name}: {err}")
            continue
        if name != own:
            why = f"NodePool {name}, the next tier ({'; '.join(refused)}); {why}"
        return _held(manifest, recorder), why
    raise NoFittingReplacement("no NodePool can take the replacement: " + "; ".join(refused))


def _held(manifest: dict[str, Any], recorder: Recorder) -> dict[str, Any]:
    """The NodeClaim with gpuwarden's hold (docs/cluster.md, "Replacement capacity"):
    ``karpenter.sh/do-not-disrupt: "true"`` (Karpenter's registration copies it to the node) until
    ``replacement.hold_minutes`` from now, so its emptiness consolidation does not take the node
    before the pods it was launched for arrive. `release_holds` takes it back."""
    minutes = recorder.deps.policy.replacement.hold_minutes
    until = ann.rfc3339(recorder.deps.clock() + timedelta(minutes=minutes))
    notes = manifest["metadata"].setdefault("annotations", {})
    notes |= {DO_NOT_DISRUPT: "true", ann.HOLD_UNTIL: until}
    return manifest


def _in_use(kube: KubePort, node: str) -> bool:
    """A workload pod (not a DaemonSet's, not a mirror) runs on ``node``."""
    return any(
        p.phase == "Running" and not p.is_daemonset and not p.is_mirror and not p.terminating
        for p in kube.list_pods_on_node(node)
    )


def _release(recorder: Recorder, claim: dict[str, Any]) -> str | None:
    """Take back gpuwarden's hold on ``claim`` when its pods run on its node or its time has passed
    (None: it stays, or there is none)."""
    kube, now = recorder.deps.kube, recorder.deps.clock()
    meta = claim.get("metadata") or {}
    until = (meta.get("annotations") or {}).get(ann.HOLD_UNTIL)
    if until is None:
        return None
    name, node = str(meta.get("name")), (claim.get("status") or {}).get("nodeName")
    used = bool(node) and _in_use(kube, str(node))
    if not used and isoparse(str(until)) > now:
        return None
    with contextlib.suppress(NotFound):
        kube.patch_nodeclaim(name, annotate({DO_NOT_DISRUPT: None, ann.HOLD_UNTIL: None}), None)
    if node:
        with contextlib.suppress(NotFound):
            kube.patch_node(str(node), annotate({DO_NOT_DISRUPT: None}), None)
    why = f"its pods run on {node}" if used else f"replacement.hold_minutes passed at {until}"
    recorder.add(ActionType.HOLD_RELEASED, target=NODECLAIM + name, reason=why)
    return name


def release_holds(recorder: Recorder) -> list[str]:
    """The reconcile: take back the hold of every replacement gpuwarden launched whose pods run on
    it now, or whose ``replacement.hold_minutes`` have passed, from the NodeClaim and from its node,
    only where gpuwarden's hold is (docs/cluster.md). Answers the claims released."""
    released = [_release(recorder, claim) for claim in recorder.deps.kube.list_nodeclaims()]
    return [name for name in released if name is not None]


def release_hold_of(recorder: Recorder, node_name: str) -> None:
    """The drain's last round: the hold of the replacement ``node_name``'s record names (one read of
    the node, one of its claim by name), taken back when its pods already run there."""
    kube = recorder.deps.kube
    node = kube.get_node(node_name)
    record = (node.annotations.get(ann.REPLACEMENT) or "") if node is not None else ""
    claim = kube.get_nodeclaim(record.removeprefix(NODECLAIM)) if record.startswith(NODECLAIM) else None
    if claim is not None:
        _release(recorder, claim)


def _launch(
    recorder: Recorder,
    choice: ReplacementChoice,
    node: NodeView,
    pods: list[PodView],
    peers: Sequence[PodView],
    lost: bool,
) -> tuple[str, str]:
    deps = recorder.deps
    assert choice.target is not None
    if choice.strategy == "nodeclaim":
        manifest, why = _tiered_manifest(recorder, choice.target, node, pods, peers, lost)
        return NODECLAIM + deps.kube.create_nodeclaim(manifest), why
    if choice.strategy == "asg":
        return deps.cloud.raise_asg_desired(choice.target, recorder.event_id), "desired capacity +1"
    fleet = deps.policy.replacement
    value = deps.cloud.launch_fleet(recorder.event_id, choice.target, fleet.fleet_instance_types, fleet.fleet_subnets)
    return value, "EC2 Fleet instant, spot first"


@dataclass(frozen=True)
class Replaced:
    """What `ensure_replacement` did: `replacement`, `replacement-skipped` or `replacement-failed`."""

    type: ActionType
    reason: str
    target: str | None = None


def _skip(recorder: Recorder, reason: str, **details: Any) -> Replaced:
    recorder.add(ActionType.REPLACEMENT_SKIPPED, reason=reason, **details)
    return Replaced(ActionType.REPLACEMENT_SKIPPED, reason)


def mark_claim(node: NodeView, notice: Notice, policy: ReplacementPolicy) -> str | None:
    """The claim the mark can carry (`node_ops.mark_node`), so the launch needs no write of its own:
    a NodePool node's NodeClaim for this event. None where the strategy is decided later (an Auto
    Scaling group or a Fleet asks AWS first) or no replacement is launched."""
    if not policy.enabled or not node.nodepool:
        return None
    return NODECLAIM + nodeclaim_name(notice.event_id, node.name)


def drop_claim(kube: KubePort, node: str) -> None:
    """Take back a claim whose replacement is not launched (Karpenter replaces the node, nothing
    fits, or the launch failed)."""
    _record(kube, node, None)


def _record(kube: KubePort, node: str, value: str | None) -> None:
    """The node's replacement record; a node already gone (Karpenter finished it) has nothing to record."""
    with contextlib.suppress(NotFound):
        kube.patch_node(node, annotate({ann.REPLACEMENT: value}), None)


def _planned(strategy: str, claim_name: str, event_id: str) -> str:
    """What the claim writes. A NodeClaim's name is known before it is created (`nodeclaim_name`),
    so its claim is already the record and the launch needs no second write; an Auto Scaling
    group's or a Fleet's is `pending:<event>` until the launch answers."""
    return NODECLAIM + claim_name if strategy == "nodeclaim" else PENDING + event_id


def _claim(recorder: Recorder, node: NodeView, ours: str) -> NodeView | Replaced:
    """Write ``ours`` on the node, RV-checked; the winner launches. Answers the claimed node, or the
    skip: the node is Karpenter's to replace now (`karpenter.sh/disrupted`, read on the node as the
    write finds it, so a taint Karpenter adds after the mark is seen without a read of its own), or
    another delivery claimed it. Our own claim, from a run that stopped before the launch, is ours
    to resume."""

    def decide(current: NodeView) -> Patch | None:
        return annotate({ann.REPLACEMENT: ours}) if claimable(current) else None

    now = update_node(recorder.deps.kube, node, decide).obj
    if now is None:
        return _skip(recorder, f"node {node.name} is gone")
    if now.karpenter_disrupted:
        if now.annotations.get(ann.REPLACEMENT) == ours:
            drop_claim(recorder.deps.kube, node.name)
        why = f"{LEFT_TO_KARPENTER}: node {node.name} is tainted {KARPENTER_DISRUPTED_TAINT}"
        return _skip(recorder, why, left_to=KARPENTER)
    return now if now.annotations.get(ann.REPLACEMENT) == ours else _skip(recorder, "another delivery is launching it")


def ensure_replacement(
    recorder: Recorder,
    node: NodeView,
    notice: Notice,
    pods: list[PodView],
    peers: Sequence[PodView] | None = None,
    *,
    claimed: bool = False,
) -> Replaced:
    """Launch one replacement for ``node`` where its pods can run (``peers``: the pods of their gangs,
    as the run's checkpoint step found them; None: found now, one LIST per gang). ``claimed``: this run's mark wrote the
    claim (`mark_claim`), read before the launch by the kind's replacement guard."""
    deps = recorder.deps
    lost = not deps.is_voluntary(notice.kind)  # the node is being taken: its capacity leaves its pool
    claim_name = nodeclaim_name(notice.event_id, node.name)  # this event's NodeClaim, were it one
    existing = node.annotations.get(ann.REPLACEMENT)
    if existing and not existing.startswith(PENDING) and existing != NODECLAIM + claim_name:
        return _skip(recorder, f"already launched: {existing}")
    asg = deps.cloud.asg_of(notice.instance_id or node.instance_id or "") if not node.nodepool else None
    choice = choose_replacement(node, asg, deps.policy.replacement)
    if choice.strategy == "none":
        return _skip(recorder, choice.reason)
    if existing == PENDING + notice.event_id and choice.strategy == "asg":
        return _skip(recorder, "an earlier run claimed it and may have raised the group")
    ours = _planned(choice.strategy, claim_name, notice.event_id)
    if claimed and existing == ours:
        return _launched(recorder, choice, node, pods, peers, lost)
    if choice.strategy == "nodeclaim" and existing == ours and deps.kube.get_nodeclaim(claim_name):
        return _skip(recorder, f"already launched: {existing}")  # a redelivery after the launch
    now = _claim(recorder, node, ours)
    if isinstance(now, Replaced):
        return now
    return _launched(recorder, choice, now, pods, peers, lost)


def _launched(
    recorder: Recorder,
    choice: ReplacementChoice,
    node: NodeView,
    pods: list[PodView],
    peers: Sequence[PodView] | None,
    lost: bool,
) -> Replaced:
    """Launch what ``node``'s claim (this run's) names; on failure the claim is taken back."""
    kube = recorder.deps.kube
    try:
        if peers is None and choice.strategy == "nodeclaim":  # no checkpoint step looked: one LIST per gang
            peers = gang_peers(find_gangs(recorder, pods), pods)
        gang = peers or []
        value, why = _launch(recorder, choice, node, pods, gang, lost)
    except NoFittingReplacement as err:
        drop_claim(kube, node.name)
        return _skip(recorder, str(err), strategy=choice.strategy)
    except GpuwardenError as err:
        # recorded before the claim is taken back: in an outage that write fails too
        recorder.add(ActionType.REPLACEMENT_FAILED, node, strategy=choice.strategy, reason=str(err))
        drop_claim(kube, node.name)
        return Replaced(ActionType.REPLACEMENT_FAILED, str(err))
    if value != node.annotations.get(ann.REPLACEMENT):  # the claim was `pending:`: the launch's answer is the record
        _record(kube, node.name, value)
    recorder.add(ActionType.REPLACEMENT, node, target=value, strategy=choice.strategy, reason=why)
    return Replaced(ActionType.REPLACEMENT, why, value)


def reconcile_holds(recorder: Recorder, hooks: object, drain_locally: bool, planned: list[Any]) -> str:
    """The periodic reconcile's part (`KindSpec.reconcile`): a hold the drain's last round left
    behind (its pods were not there yet) is taken back once they are, or its time has passed."""
    released = release_holds(recorder)
    return f"; {len(released)} replacement hold(s) released" if released else ""


def _launch_failed(claim: dict[str, Any] | None) -> str | None:
    """Why a replacement NodeClaim will not come up (None: it may): Karpenter deleted it, or its
    ``Launched`` condition is False (insufficient capacity, an unavailable offering)."""
    if claim is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
        return "was deleted by Karpenter"
    for cond in (claim.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Launched" and cond.get("status") == "False":
            message = f": {cond['message']}" if cond.get("message") else ""
            return f"did not launch ({cond.get('reason') or 'Launched=False'}{message})"
    return None


def _next_attempt(recorder: Recorder, claim: dict[str, Any] | None, node: NodeView, lost: bool) -> dict[str, Any]:
    """The next launch's NodeClaim (named by the caller): the failed claim's pool and spec, or, for
    one already gone, the tiers chosen again for the pods still on the node."""
    if claim is None:
        own = node.nodepool or ""
        pods = [p for p in recorder.deps.kube.list_pods_on_node(node.name) if p.node_name == node.name]
        if not any(not p.is_daemonset and not p.is_mirror and not p.finished for p in pods):
            raise NoFittingReplacement("no pod is left on the node to size the next one for")
        manifest, _ = _tiered_manifest(recorder, own, node, pods, [], lost)
        return manifest
    meta = claim.get("metadata") or {}
    manifest = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
        "spec": claim.get("spec") or {},
    }
    return _held(manifest, recorder)


def follow_replacement(recorder: Recorder, node_name: str, event_id: str, *, lost: bool) -> None:
    """A drain round reads the replacement (docs/cluster.md, "Replacement capacity"): one that
    Karpenter marked ``Launched=False`` or deleted before the drain is over is launched again, at
    most ``replacement.attempts`` launches in all, each recorded: a new NodeClaim of the same pool
    and spec (Karpenter's provisioner then leaves out the offering it just found unavailable), or,
    for a claim already gone, one chosen again (limits and tiers) for the pods still on the node.
    The node's record names the live claim; a node that is gone, or a claim that is up, is left."""
    deps = recorder.deps
    kube = deps.kube
    node = kube.get_node(node_name)
    record = node.annotations.get(ann.REPLACEMENT) if node is not None else None
    if node is None or not record or not record.startswith(NODECLAIM):
        return
    name = record.removeprefix(NODECLAIM)
    claim = kube.get_nodeclaim(name)
    why = _launch_failed(claim)
    if why is None:
        return
    failed = [c for c in (node.annotations.get(ann.REPLACEMENT_FAILED) or "").split(",") if c] + [name]
    limit = deps.policy.replacement.attempts
    again = nodeclaim_name(f"{event_id}/attempt-{len(failed) + 1}", node.name)
    try:
        if len(failed) >= limit:
            raise NoFittingReplacement(f"{len(failed)} of replacement.attempts {limit} used")
        manifest = _next_attempt(recorder, claim, node, lost)
    except NoFittingReplacement as err:
        update_node(kube, node, lambda _: annotate({ann.REPLACEMENT: None, ann.REPLACEMENT_FAILED: ",".join(failed)}))
        recorder.add(ActionType.REPLACEMENT_FAILED, node, target=record, reason=f"NodeClaim {name} {why}; {err}")
        return
    manifest["metadata"]["name"] = again
    value = NODECLAIM + kube.create_nodeclaim(manifest)
    tried = {ann.REPLACEMENT: value, ann.REPLACEMENT_FAILED: ",".join(failed)}
    update_node(kube, node, lambda _: annotate(tried))
    reason = f"attempt {len(failed) + 1} of {limit}: NodeClaim {name} {why}"
    recorder.add(ActionType.REPLACEMENT, node, target=value, strategy="nodeclaim", reason=reason)
