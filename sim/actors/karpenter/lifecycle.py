"""The NodeClaim lifecycle controller (kubernetes-sigs/karpenter ``pkg/controllers/nodeclaim/lifecycle``):
the finalizer ``karpenter.sh/termination`` on every NodeClaim, launch (a Ready Node after
``launch_seconds``), registration's finalizer on the Node; a deleting NodeClaim gets
``karpenter.sh/nodeclaim-termination-timestamp`` = deletionTimestamp + ``spec.terminationGracePeriod``
(when set), deletes its Node, waits for it to go, terminates the instance, drops its finalizer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sim.actors.karpenter.cluster import Cluster
from sim.actors.karpenter.objects import (
    FINALIZER,
    GPU,
    GPUS,
    INSTANCE_TYPE,
    NODECLAIMS,
    NODEPOOL_LABEL,
    NODES,
    TERMINATION_TIMESTAMP,
    ZONE,
    ZONES,
    Obj,
    excluded,
    go_duration,
    instance_id,
    meta_of,
    requirements,
)
from sim.builders import gpu_node
from sim.clock import parse_rfc3339, rfc3339


@dataclass
class LifecycleController:
    cluster: Cluster
    registered: set[str] = field(default_factory=set)
    launched: int = 0

    def launch_seconds_for(self, claim: Obj) -> float:
        """How long the claim's instance takes to become a Ready Node (sim seconds)."""
        return self.cluster.settings.launch_seconds

    def register(self, claims: list[Obj], nodes: list[Obj], now: datetime) -> None:
        """Registration's finalizer on each NodeClaim's Node (once per Node, as registration runs once)."""
        by_provider = {(n.get("spec") or {}).get("providerID"): n for n in nodes}
        for claim in claims:
            node = by_provider.get((claim.get("status") or {}).get("providerID"))
            if node is None or node["metadata"]["name"] in self.registered or meta_of(node).get("deletionTimestamp"):
                continue
            self.registered.add(node["metadata"]["name"])
            finalizers = meta_of(node).get("finalizers") or []
            if FINALIZER not in finalizers:
                meta = {"finalizers": [*finalizers, FINALIZER], "resourceVersion": node["metadata"]["resourceVersion"]}
                self.cluster.patch(f"{NODES}/{node['metadata']['name']}", {"metadata": meta})

    def reconcile(self, claim: Obj, nodes: list[Obj], now: datetime) -> None:
        meta = meta_of(claim)
        path = f"{NODECLAIMS}/{meta['name']}"
        if meta.get("deletionTimestamp"):
            self._finalize(claim, nodes, now)
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            body = {
                "finalizers": [*(meta.get("finalizers") or []), FINALIZER],
                "resourceVersion": meta["resourceVersion"],
            }
            self.cluster.patch(path, {"metadata": body})
        status = claim.get("status") or {}
        created = parse_rfc3339(meta["creationTimestamp"])
        if not status.get("providerID") and now >= created + timedelta(seconds=self.launch_seconds_for(claim)):
            self._launch(claim, now)

    def _finalize(self, claim: Obj, nodes: list[Obj], now: datetime) -> None:
        meta = meta_of(claim)
        name, path = meta["name"], f"{NODECLAIMS}/{meta['name']}"
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        grace = (claim.get("spec") or {}).get("terminationGracePeriod")
        if grace and TERMINATION_TIMESTAMP not in (meta.get("annotations") or {}):
            at = parse_rfc3339(meta["deletionTimestamp"]) + go_duration(str(grace))
            body = {"annotations": {TERMINATION_TIMESTAMP: rfc3339(at)}, "resourceVersion": meta["resourceVersion"]}
            if not self.cluster.patch(path, {"metadata": body}):
                return
        provider = (claim.get("status") or {}).get("providerID")
        mine = [n for n in nodes if provider and (n.get("spec") or {}).get("providerID") == provider]
        for node in mine:
            if not meta_of(node).get("deletionTimestamp") and self.cluster.delete(
                f"{NODES}/{node['metadata']['name']}"
            ):
                self.cluster.record(now, "node-deleted", node["metadata"]["name"], f"nodeclaim {name} is deleting")
        if mine or (provider and not self.cluster.instance_gone(instance_id(provider), name, now)):
            return
        fresh = self.cluster.get(path)
        if fresh is None:
            return
        left = [f for f in meta_of(fresh).get("finalizers") or [] if f != FINALIZER]
        if self.cluster.patch(
            path, {"metadata": {"finalizers": left, "resourceVersion": fresh["metadata"]["resourceVersion"]}}
        ):
            self.cluster.record(now, "nodeclaim-finalized", name)

    def _launch(self, claim: Obj, now: datetime) -> None:
        spec, name = claim.get("spec") or {}, claim["metadata"]["name"]
        req = requirements(spec)
        if ZONE not in req:  # the EC2NodeClass's subnets: one per zone of the stand-in's region
            req[ZONE] = [z for z in ZONES if z not in excluded(spec, ZONE)]
        if INSTANCE_TYPE not in req and excluded(spec, INSTANCE_TYPE):
            req[INSTANCE_TYPE] = [t for t in GPUS if t not in excluded(spec, INSTANCE_TYPE)]
        itype, zone, capacity = self._offering(req)
        self.launched += 1
        node_name = f"ip-10-0-{200 + self.launched % 50}-{10 + self.launched}.us-west-2.compute.internal"
        instance = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
        pool = (meta_of(claim).get("labels") or {}).get(NODEPOOL_LABEL)
        node = gpu_node(
            node_name,
            instance,
            zone=zone,
            instance_type=itype,
            nodepool=pool,
            capacity_type=capacity,
            gpus=GPUS.get(itype, 8),
            gpu_taint=any(t.get("key") == GPU for t in spec.get("taints") or []),
        )
        # registration's syncNode: the claim's labels and annotations onto its node (lo.Assign), so a
        # hold or any other annotation written on the claim before it registers travels with it
        node["metadata"]["labels"].update(meta_of(claim).get("labels") or {})
        node["metadata"]["annotations"] = {
            **(node["metadata"].get("annotations") or {}),
            **(meta_of(claim).get("annotations") or {}),
        }
        node["metadata"]["finalizers"] = [FINALIZER]
        uid = claim["metadata"]["uid"]
        node["metadata"]["ownerReferences"] = [
            {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name, "uid": uid, "blockOwnerDeletion": True}
        ]
        self.cluster.sim.create(node)  # the kubelet registers its Node
        self.registered.add(node_name)
        # launch's PopulateNodeClaimDetails: the provider's labels under the claim's own. Every provider
        # gives each single-valued `In` requirement of the claim, the instance type and its
        # single-valued requirements (arch, os) and the offering's (zone, capacity type); what a
        # provider adds of its own (karpenter.k8s.aws/*, karpenter.kwok.sh/*) is not modelled
        single = {key: values[0] for key, values in req.items() if len(values) == 1}
        labels = single | {"node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/zone": zone}
        labels |= {"karpenter.sh/capacity-type": capacity, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}
        labels |= meta_of(claim).get("labels") or {}
        self.cluster.patch(f"{NODECLAIMS}/{name}", {"metadata": {"labels": labels}})
        conditions = [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": rfc3339(now)}
            for t in ("Launched", "Registered", "Initialized", "Ready")
        ]
        status = {
            "providerID": node["spec"]["providerID"],
            "nodeName": node_name,
            "capacity": node["status"]["capacity"],
            "allocatable": node["status"]["allocatable"],
            "conditions": conditions,
        }
        self.cluster.patch(f"{NODECLAIMS}/{name}/status", {"status": status})
        self.cluster.record(now, "launched", name, f"{node_name} {itype} {zone} {capacity}")

    def _offering(self, req: dict[str, list[str]]) -> tuple[str, str, str]:
        types = req.get("node.kubernetes.io/instance-type") or ["p4d.24xlarge"]
        zones = req.get("topology.kubernetes.io/zone") or ["us-west-2a"]
        capacities = req.get("karpenter.sh/capacity-type") or ["on-demand"]
        for capacity in sorted(capacities, key=lambda c: c != "spot"):  # spot first, as the price order would
            for itype in types:
                for zone in zones:
                    if (itype, zone, capacity) not in self.cluster.unavailable:
                        return itype, zone, capacity
        return types[0], zones[0], capacities[0]
