"""The provisioner (kubernetes-sigs/karpenter ``pkg/controllers/provisioning``): pods on deleting
nodes (and pending pods) are scheduled against existing schedulable nodes and in-flight NodeClaims (a
NodeClaim someone else created counts); only what does not fit gets a new NodeClaim from the
NodePool's template, after the batch window (``BATCH_IDLE_DURATION``). The scheduling simulation
counts only ``nvidia.com/gpu`` (CPU and memory are assumed to fit).

Of a deleting node's pods, only those that will leave count (v1.14.1 ``Provisioner.Schedule`` takes
``nodes.Deleting().CurrentlyReschedulablePods``; ``pkg/utils/pdb/pdb.go`` ``IsCurrentlyReschedulable``,
since #2033, v1.4.0): not a pod with an active ``karpenter.sh/do-not-disrupt`` (``IsDisruptable``), not
one a fully blocking PDB holds (``maxUnavailable`` 0 or "0%", ``minAvailable`` "100%", or more than one
PDB). No capacity is launched for a pod that stays, so emptiness consolidation has nothing to remove
(docs/simulate.md, "do-not-disrupt on an expired node"). A pending pod is scheduled whatever its
annotations (``GetPendingPods``: ``IsProvisionable``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sim.actors.controllers import tolerates
from sim.actors.karpenter.cluster import Cluster, claim_for
from sim.actors.karpenter.objects import (
    FINALIZER,
    GPU,
    GPUS,
    INSTANCE_TYPE,
    NODECLAIMS,
    NODEPOOL_LABEL,
    NODEPOOLS,
    NODES,
    PDBS,
    Obj,
    active,
    currently_reschedulable,
    daemon,
    gpu_request,
    meta_of,
    mirror,
    owned_by,
    pod_key,
    requirements,
    terminal,
    terminating,
)


@dataclass
class Provisioner:
    cluster: Cluster
    #: deleting NodeClaim -> the NodeClaims the provisioner created while its pods needed a home
    replacements: dict[str, list[str]] = field(default_factory=dict)
    need_since: datetime | None = None
    batch: dict[str, Obj] = field(default_factory=dict)  # uid -> pod, as first seen needing a home
    #: uid -> a deleting node's GPU pod that stays (do-not-disrupt, a fully blocking PDB): no
    #: capacity for it until it leaves; then its controller brings it back as a pending pod
    held: dict[str, Obj] = field(default_factory=dict)

    def displaced(self, claim: Obj, now: datetime) -> None:
        """The pods of a node marked for deletion go into the batch at once: evicted or not, their
        controllers bring them back as pending pods that need this capacity."""
        node = (claim.get("status") or {}).get("nodeName")
        if not node:
            return
        self._sort(self.cluster.items("/api/v1/pods", f"spec.nodeName={node}"), {str(node)}, now)

    def provision(self, now: datetime) -> None:
        claims = self.cluster.items(NODECLAIMS)
        nodes = self.cluster.items(NODES)
        pods = self.cluster.items("/api/v1/pods")
        deleting = self._deleting_nodes(claims, nodes)
        pdbs = self._sort(pods, deleting, now)
        self._released({p["metadata"]["uid"]: p for p in pods})
        if not self.batch:
            return
        if self.need_since is None:
            self.need_since = now  # the batch window opens
        if now < self.need_since + timedelta(seconds=self.cluster.settings.batch_idle_seconds):
            return
        needs = self._still_needing(pods, deleting, now, pdbs)
        self.batch.clear()
        self.need_since = None
        homeless = self._pack(needs, self._capacity(claims, nodes, pods, deleting))
        by_node = {n["metadata"]["name"]: n for n in nodes}
        pools = self.cluster.items(NODEPOOLS)
        planned: list[tuple[Obj, list[Obj], list[int]]] = []  # (pool, pods, [GPUs left])
        for pod in homeless:
            pool = self._pool_for(pod, by_node, pools)
            if pool is None:
                continue  # no NodePool can take it: stays where it is (Karpenter logs it)
            plan = next((p for p in planned if p[0] is pool and p[2][0] >= gpu_request(pod)), None)
            if plan is None:
                plan = (pool, [], [max(GPUS.get(t, 8) for t in self._pool_types(pool))])
                planned.append(plan)
            plan[1].append(pod)
            plan[2][0] -= gpu_request(pod)
        for pool, members, _ in planned:
            self._create_claim(pool, members, by_node, claims, now)

    def _sort(self, pods: list[Obj], deleting: set[str], now: datetime) -> _Pdbs:
        """Each GPU pod that needs a home into the batch; each one a deleting node keeps, held."""
        pdbs = _Pdbs(self.cluster)
        for pod in pods:
            if gpu_request(pod) <= 0:
                continue
            uid = pod["metadata"]["uid"]
            if self._needs_home(pod, deleting, now, pdbs):
                self.batch.setdefault(uid, pod)
                self.held.pop(uid, None)
            elif (pod.get("spec") or {}).get("nodeName") in deleting and active(pod):
                self.held[uid] = pod
        return pdbs

    def _released(self, live: dict[str, Obj]) -> None:
        """A held pod that has left (evicted, deleted, terminating) needs a home now, as the pods of
        the batch do: its controller recreates it pending (not one that finished)."""
        for uid, seen in list(self.held.items()):
            pod = live.get(uid)
            if pod is not None and active(pod):
                continue
            del self.held[uid]
            if pod is None or not terminal(pod):
                self.batch.setdefault(uid, seen)

    def _still_needing(self, pods: list[Obj], deleting: set[str], now: datetime, pdbs: _Pdbs) -> list[Obj]:
        """The batch's pods that need capacity now: those still pending or displaced (a pod bound
        meanwhile, on capacity launched for it or freed elsewhere, needs none: the provisioner
        schedules only pending pods and those of deleting nodes), and those evicted meanwhile
        whose controller recreates them as pending pods (a Job's; the simulator's
        ReplicaSetReplacer already placed a ReplicaSet's or StatefulSet's elsewhere)."""
        live = {p["metadata"]["uid"]: p for p in pods}
        out = []
        for uid, seen in self.batch.items():
            pod = live.get(uid)
            if pod is not None and active(pod):
                if self._needs_home(pod, deleting, now, pdbs):
                    out.append(pod)
                continue
            if owned_by(seen, "apps/v1", "ReplicaSet") or owned_by(seen, "apps/v1", "StatefulSet"):
                continue
            if not _brought_back(seen, pods):
                out.append(seen)
        return out

    def _pack(self, needs: list[Obj], bins: list[list[Any]]) -> list[Obj]:
        """First-fit decreasing onto existing and in-flight capacity; what does not fit."""
        homeless: list[Obj] = []
        for pod in sorted(needs, key=gpu_request, reverse=True):
            fit = next((b for b in bins if b[1] >= gpu_request(pod) and self._fits(pod, b[0])), None)
            if fit is None:
                homeless.append(pod)
            else:
                fit[1] -= gpu_request(pod)
        return homeless

    @staticmethod
    def _deleting_nodes(claims: list[Obj], nodes: list[Obj]) -> set[str]:
        marked = {(c.get("status") or {}).get("providerID") for c in claims if meta_of(c).get("deletionTimestamp")}
        return {
            n["metadata"]["name"]
            for n in nodes
            if meta_of(n).get("deletionTimestamp") or (n.get("spec") or {}).get("providerID") in marked
        }

    @staticmethod
    def _needs_home(pod: Obj, deleting: set[str], now: datetime, pdbs: _Pdbs) -> bool:
        if daemon(pod) or mirror(pod):
            return False
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            return node in deleting and currently_reschedulable(pod, now, pdbs.items())
        return (pod.get("status") or {}).get("phase") == "Pending" and not terminating(pod)

    @staticmethod
    def _capacity(claims: list[Obj], nodes: list[Obj], pods: list[Obj], deleting: set[str]) -> list[list[Any]]:
        """[taints-holder, free GPUs] for every schedulable node and every in-flight NodeClaim."""
        used: dict[str, int] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not terminal(pod):
                used[node] = used.get(node, 0) + gpu_request(pod)
        bins: list[list[Any]] = []
        for node in nodes:
            name = node["metadata"]["name"]
            if name in deleting or (node.get("spec") or {}).get("unschedulable"):
                continue
            gpus = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU) or 0)
            bins.append([node, gpus - used.get(name, 0)])
        for claim in claims:
            if meta_of(claim).get("deletionTimestamp") or (claim.get("status") or {}).get("nodeName"):
                continue
            types = requirements(claim.get("spec") or {}).get("node.kubernetes.io/instance-type") or [""]
            bins.append([claim, max(GPUS.get(t, 8) for t in types)])
        return bins

    @staticmethod
    def _fits(pod: Obj, holder: Obj) -> bool:
        taints = (holder.get("spec") or {}).get("taints") or []
        return all(t.get("effect") == "PreferNoSchedule" or tolerates(pod, t) for t in taints)

    def _pool_for(self, pod: Obj, by_node: dict[str, Obj], pools: list[Obj]) -> Obj | None:
        """The pod's own NodePool (the one of the node it is leaving), else the first it tolerates."""
        old_node = by_node.get(str((pod.get("spec") or {}).get("nodeName")))
        name = (meta_of(old_node).get("labels") or {}).get(NODEPOOL_LABEL) if old_node else None
        pool = next((p for p in pools if p["metadata"]["name"] == name), None)
        return pool or next((p for p in pools if self._fits(pod, (p.get("spec") or {}).get("template") or {})), None)

    @staticmethod
    def _pool_types(pool: Obj) -> list[str]:
        template = ((pool.get("spec") or {}).get("template") or {}).get("spec") or {}
        return requirements(template).get(INSTANCE_TYPE) or [""]

    def _create_claim(
        self, pool: Obj, pods: list[Obj], by_node: dict[str, Obj], claims: list[Obj], now: datetime
    ) -> None:
        template = (pool.get("spec") or {}).get("template") or {}
        tspec = dict(template.get("spec") or {})
        body: Obj = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "generateName": f"{pool['metadata']['name']}-",
                "labels": {
                    **((template.get("metadata") or {}).get("labels") or {}),
                    NODEPOOL_LABEL: pool["metadata"]["name"],
                },
                "annotations": {"karpenter.sh/nodepool-hash-version": "v3"},
                "ownerReferences": [
                    {
                        "apiVersion": "karpenter.sh/v1",
                        "kind": "NodePool",
                        "name": pool["metadata"]["name"],
                        "uid": pool["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": [FINALIZER],
            },
            "spec": {
                **{k: v for k, v in tspec.items() if k in ("nodeClassRef", "requirements", "taints", "startupTaints")},
                **{k: v for k, v in tspec.items() if k in ("expireAfter", "terminationGracePeriod")},
                "resources": {"requests": {GPU: str(sum(gpu_request(p) for p in pods))}},
            },
        }
        made = self.cluster.http().call("POST", NODECLAIMS, body)
        name = made["metadata"]["name"]
        for pod in pods:
            old_node = by_node.get(str((pod.get("spec") or {}).get("nodeName")))
            claim = claim_for(old_node, claims) if old_node else None
            source = claim["metadata"]["name"] if claim else f"pending {pod_key(pod)}"
            if name not in self.replacements.setdefault(source, []):
                self.replacements[source].append(name)
        what = ", ".join(f"{pod_key(p)} ({gpu_request(p)} GPU)" for p in pods)
        self.cluster.record(now, "nodeclaim-created", name, f"for {what}")


class _Pdbs:
    """The cluster's PodDisruptionBudgets, listed once per pass and only if a deleting node's pod
    asks (``pdb.NewLimits`` lists them once per scheduling pass)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._items: list[Obj] | None = None

    def items(self) -> list[Obj]:
        if self._items is None:
            self._items = self.cluster.items(PDBS)
        return self._items


def _controller(pod: Obj) -> tuple[str, str] | None:
    refs = meta_of(pod).get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return (str(ref.get("kind")), str(ref.get("name"))) if ref else None


def _brought_back(gone: Obj, pods: list[Obj]) -> bool:
    """Whether ``gone``'s controller has already made its successor (a pod of the same controller,
    created since): pending, it is in the batch as itself (`Provisioner._sort`); bound, it needs
    nothing. Karpenter schedules only the pods it lists at that moment, the pending ones and those of
    deleting nodes, never one that is gone (v1.14.1 ``Provisioner.Schedule``: ``GetPendingPods``, then
    ``Deleting().CurrentlyReschedulablePods``, "so that we undershoot if pods are actively migrating").
    The stand-in counts a gone Job pod only while its successor does not exist yet (no Job controller
    runs beside a bare simulator); before, it counted both, and launched a node the successor, bound
    elsewhere, never needed (docs/simulate.md, "Launches for pods that are gone")."""
    owner = _controller(gone)
    if owner is None:
        return False
    meta = meta_of(gone)
    return any(
        _controller(p) == owner
        and meta_of(p).get("uid") != meta.get("uid")
        and str(meta_of(p).get("creationTimestamp") or "") >= str(meta.get("creationTimestamp") or "")
        and active(p)
        for p in pods
    )
