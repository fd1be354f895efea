"""Replacement capacity: never more than one per interrupted node (docs/cluster.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.accelerators import ResourceClaimView, resource_claim_from_json
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import GpuwardenError, KubeError, NoFittingReplacement, NotFound
from gpuwarden.domain.gangs import Gang
from gpuwarden.domain.nodepools import nodepool_from_json
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.policy import ReplacementPolicy
from gpuwarden.domain.ports import KubePort
from gpuwarden.domain.protections import forced_at_of, left_for_good
from gpuwarden.domain.replacement import (
    ReplacementChoice,
    choose_replacement,
    claimable,
    nodeclaim_manifest,
    nodeclaim_name,
)
from gpuwarden.domain.sizing import daemon_pods, displaced, movers, size
from gpuwarden.domain.tiers import tiers
from gpuwarden.domain.views import (
    KARPENTER_DISRUPTED_TAINT,
    NODEPOOL_LABEL,
    ZONE_LABEL,
    NodeView,
    PodView,
)
from gpuwarden.domain.volumes import ClaimView, VolumePin, VolumeView, pv_from_json, pvc_from_json, volume_pin
from gpuwarden.domain.wording import count
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.gangs import find_gangs
from gpuwarden.services.engine.holds import NODECLAIM, held
from gpuwarden.services.engine.node_ops import pods_on
from gpuwarden.services.engine.result import KARPENTER, LEFT_TO_KARPENTER
from gpuwarden.services.engine.writes import Patch, annotate, update_node

PENDING = "pending:"
FORBIDDEN = 403


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
    recorder: Recorder,
    own: str,
    node: NodeView,
    pods: list[PodView],
    peers: Sequence[PodView],
    lost: bool,
    failed: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """The NodeClaim for the first NodePool that can take the replacement (docs/cluster.md, "Limits
    and tiers"): ``own`` first, then the others whose template admits the pods, by weight, each
    only where its ``spec.limits`` leave room and not in ``failed`` (pool → why: a replacement
    there already failed to launch for this node). ``lost``: the node is being taken (an
    involuntary notice), so its capacity leaves its own pool's count. Raises
    `NoFittingReplacement` naming each pool's reason when none can."""
    kube = recorder.deps.kube
    listed = kube.list_nodepools()
    by_name = {str((p.get("metadata") or {}).get("name", "")): p for p in listed}
    moving = movers(pods)  # the one answer to "which pods move" (docs/cluster.md)
    claims, pin = claims_and_pin(kube, moving)
    moved = displaced(moving, claims)
    daemons, unread = _daemons(kube)
    pools = [nodepool_from_json(p) for p in listed]
    requests = size(moved, (), claims).requests
    order = tiers(own, pools, moved, node, requests, zones=pin.zones or (), lost=lost, daemons=daemons)
    zones = peer_zones(kube, node, peers)
    refused = [c.refused for c in order.choices if c.refused]
    for name in order.usable:
        if failed and name in failed:
            refused.append(f"NodePool {name}: {failed[name]}")
            continue
        try:
            manifest, why = nodeclaim_manifest(
                by_name[name], node, moved, recorder.event_id, zones, claims=claims, volumes=pin, daemons=daemons
            )
        except NoFittingReplacement as err:
            refused.append(f"NodePool {name}: {err}")
            continue
        if name != own:
            why = f"NodePool {name}, the next tier ({'; '.join(refused)}); {why}"
        return held(manifest, recorder), f"{why}{unread}"
    raise NoFittingReplacement("no NodePool can take the replacement: " + "; ".join(refused))


def _daemons(kube: KubePort) -> tuple[list[PodView], str]:
    """The cluster's DaemonSets' pods (`sizing.daemon_pods`), one LIST; a role that may not list them
    (a deployment older than the rule) sizes without them, and the reason says so."""
    try:
        return daemon_pods(kube.list_daemonsets()), ""
    except KubeError as err:
        if err.status != FORBIDDEN:
            raise
        return [], "; DaemonSets not readable (403): sized without their pods (gpuwarden doctor names the rule)"


def _launch(
    recorder: Recorder,
    choice: ReplacementChoice,
    node: NodeView,
    pods: list[PodView],
    peers: Sequence[PodView],
    lost: bool,
) -> tuple[str, str, str | None]:
    """Launch it: the record's value, why, and a NodeClaim's NodePool (None: not a NodeClaim)."""
    deps = recorder.deps
    assert choice.target is not None
    if choice.strategy == "nodeclaim":
        manifest, why = _tiered_manifest(recorder, choice.target, node, pods, peers, lost)
        return NODECLAIM + deps.kube.create_nodeclaim(manifest), why, _pool_of(manifest)
    if choice.strategy == "asg":
        return deps.cloud.raise_asg_desired(choice.target, recorder.event_id), "desired capacity +1", None
    fleet = deps.policy.replacement
    value = deps.cloud.launch_fleet(recorder.event_id, choice.target, fleet.fleet_instance_types, fleet.fleet_subnets)
    return value, "EC2 Fleet instant, spot first", None


def _pool_of(claim: Mapping[str, Any]) -> str:
    return str(((claim.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL, ""))


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
    _record(kube, node, {ann.REPLACEMENT: None})


def _record(kube: KubePort, node: str, notes: Mapping[str, str | None]) -> None:
    """The node's replacement record; a node already gone (Karpenter finished it) has nothing to record."""
    with contextlib.suppress(NotFound):
        kube.patch_node(node, annotate(notes), None)


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
    on_it = len(pods)
    staying = left_for_good(notice.kind, pods, forced_at_of(notice))  # no replacement is for them
    pods = [p for p in pods if p not in staying]
    if not movers(pods):  # Karpenter's provisioner launches capacity only for pods that need it
        if claimed:  # this run's mark named a claim: taken back, or a drain round launches it as "gone"
            drop_claim(deps.kube, node.name)
        return _skip(recorder, f"no pod moves off the node ({count(on_it, 'pod')} on it, none to reschedule)")
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
        value, why, pool = _launch(recorder, choice, node, pods, gang, lost)
    except NoFittingReplacement as err:
        drop_claim(kube, node.name)
        return _skip(recorder, str(err), strategy=choice.strategy)
    except GpuwardenError as err:
        # recorded before the claim is taken back: in an outage that write fails too
        recorder.add(ActionType.REPLACEMENT_FAILED, node, strategy=choice.strategy, reason=str(err))
        drop_claim(kube, node.name)
        return Replaced(ActionType.REPLACEMENT_FAILED, str(err))
    notes = {}
    if value != node.annotations.get(ann.REPLACEMENT):  # the claim was `pending:`: the launch's answer is the record
        notes[ann.REPLACEMENT] = value
    if pool and pool != node.nodepool:  # another tier's: a later round names it if the claim is deleted
        notes[ann.REPLACEMENT_POOL] = pool
    if notes:
        _record(kube, node.name, notes)
    recorder.add(ActionType.REPLACEMENT, node, target=value, strategy=choice.strategy, reason=why)
    return Replaced(ActionType.REPLACEMENT, why, value)


def _launch_failed(claim: dict[str, Any] | None) -> str | None:
    """Why a replacement NodeClaim will not come up (None: it may): Karpenter deleted it, or its
    ``Launched`` condition is False (insufficient capacity, an unavailable offering)."""
    if claim is None:  # the mark names the first claim before its create: an outage may have cut it
        return "is gone (deleted by Karpenter, or never created)"
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return "was deleted by Karpenter"
    for cond in (claim.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Launched" and cond.get("status") == "False":
            message = f": {cond['message']}" if cond.get("message") else ""
            return f"did not launch ({cond.get('reason') or 'Launched=False'}{message})"
    return None


def _failed_pools(entries: Sequence[str]) -> dict[str, str]:
    """The NodePools of the failed claims ``<pool>/<claim>`` (an entry without a pool names none)."""
    pools: dict[str, str] = {}
    for entry in entries:
        pool, _, claim = entry.rpartition("/")
        if pool:
            pools.setdefault(pool, f"NodeClaim {claim} did not launch there")
    return pools


def _next_attempt(
    recorder: Recorder, node: NodeView, failed: Mapping[str, str], lost: bool
) -> tuple[dict[str, Any], str]:
    """The next launch's NodeClaim (named by the caller) and why there: the limits and tiers chosen
    again for the pods still on the node, the NodePools whose replacement failed left out (within a
    pool, Karpenter's launch already asked for every instance type and zone the claim allows)."""
    pods = pods_on(recorder.deps.kube, node.name)
    if not movers(pods):
        raise NoFittingReplacement("no pod is left on the node to size the next one for")
    return _tiered_manifest(recorder, node.nodepool or "", node, pods, [], lost, failed)


def follow_replacement(recorder: Recorder, node: NodeView, event_id: str, *, lost: bool) -> NodeView:
    """A drain round reads the replacement ``node``'s record names (``node``: as the round read it;
    one GET of the claim, docs/cluster.md, "Replacement capacity"). One that Karpenter deleted or
    marked ``Launched=False`` before the drain is over is replaced by the next option, at most
    ``replacement.attempts`` launches in all, each recorded: the limits and tiers chosen again for
    the pods still on the node, every NodePool where one already failed left out. A claim marked
    ``Launched=False`` is deleted first: Karpenter deletes one that failed for insufficient
    capacity itself (kubernetes-sigs/karpenter, pkg/controllers/nodeclaim/lifecycle/launch.go,
    ``IsInsufficientCapacityError`` → ``Delete``), any other only after its registration TTL of
    15 minutes (lifecycle/liveness.go, ``registrationTTL``). Answers the node as written; a claim
    that is up, or a record that is not a NodeClaim, is left."""
    deps = recorder.deps
    kube = deps.kube
    record = node.annotations.get(ann.REPLACEMENT)
    if not record or not record.startswith(NODECLAIM):
        return node
    name = record.removeprefix(NODECLAIM)
    claim = kube.get_nodeclaim(name)
    why = _launch_failed(claim)
    if why is None:
        return node
    pool = _pool_of(claim) if claim is not None else node.annotations.get(ann.REPLACEMENT_POOL) or node.nodepool or ""
    if claim is not None and not (claim.get("metadata") or {}).get("deletionTimestamp"):
        with contextlib.suppress(NotFound):  # it will not launch: it does not linger as a pending claim
            kube.delete_nodeclaim(name)
    before = [c for c in (node.annotations.get(ann.REPLACEMENT_FAILED) or "").split(",") if c]
    # the mark names the first claim before the first invocation creates it: gone, it may never have
    # been (an outage cut the first invocation, the drain handed on), so its pool is not left out on
    # that alone; Karpenter's own unavailable-offerings cache makes a second launch there that meets
    # the same shortage fail at once, and the attempt after it leaves the pool out
    unseen = claim is None and name == nodeclaim_name(event_id, node.name)
    failed = [*before, f"{pool}/{name}" if pool and not unseen else name]
    limit = deps.policy.replacement.attempts
    again = nodeclaim_name(f"{event_id}/attempt-{len(failed) + 1}", node.name)
    try:
        if len(failed) >= limit:
            raise NoFittingReplacement(f"{len(failed)} of replacement.attempts {limit} used")
        manifest, chosen = _next_attempt(recorder, node, _failed_pools(failed), lost)
    except NoFittingReplacement as err:
        gone = {ann.REPLACEMENT: None, ann.REPLACEMENT_POOL: None, ann.REPLACEMENT_FAILED: ",".join(failed)}
        written = update_node(kube, node, lambda _: annotate(gone)).obj
        recorder.add(ActionType.REPLACEMENT_FAILED, node, target=record, reason=f"NodeClaim {name} {why}; {err}")
        return written or node
    manifest["metadata"]["name"] = again
    value = NODECLAIM + kube.create_nodeclaim(manifest)
    new_pool = _pool_of(manifest)
    tried = {
        ann.REPLACEMENT: value,
        ann.REPLACEMENT_POOL: new_pool if new_pool != node.nodepool else None,
        ann.REPLACEMENT_FAILED: ",".join(failed),
    }
    written = update_node(kube, node, lambda _: annotate(tried)).obj
    reason = f"attempt {len(failed) + 1} of {limit}: NodeClaim {name} {why}; {chosen}"
    recorder.add(ActionType.REPLACEMENT, node, target=value, strategy="nodeclaim", reason=reason)
    return written or node
