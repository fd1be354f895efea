"""The node termination controller and its eviction queue (kubernetes-sigs/karpenter
``pkg/controllers/node/termination``: controller, terminator, eviction queue). A deleting Node is
tainted ``karpenter.sh/disrupted:NoSchedule``; every pod that does not tolerate that taint, is not a
mirror pod and is not stuck terminating waits for eviction; pods go in tiers (non-critical
non-DaemonSet first); the queue evicts through ``pods/eviction`` with a UID precondition, retries 429
(PDB) with per-item exponential backoff (100 ms .. 10 s), passes over pods with an active
``karpenter.sh/do-not-disrupt`` (they stall the drain), and deletes any pod whose grace period would
outlast the termination timestamp with the grace left (>= 1 s). Drained = nothing waits for 5 s; then
the instance is terminated and the Node's finalizer removed. Pods left on a finished Node are removed
as the pod garbage collector would."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sim.actors.karpenter.cluster import Cluster, claim_for
from sim.actors.karpenter.objects import (
    CRITICAL,
    DISRUPTED_TAINT,
    EVICTION_BASE_DELAY,
    EVICTION_MAX_DELAY,
    EXCLUDE_BALANCERS,
    FINALIZER,
    MIN_DRAIN_SECONDS,
    MULTIPLE_PDBS,
    NODECLAIMS,
    NODEPOOL_LABEL,
    NODES,
    TERMINATION_TIMESTAMP,
    Obj,
    active,
    daemon,
    do_not_disrupt_ends,
    drainable,
    evictable,
    instance_id,
    meta_of,
    needs_force_delete,
    pod_key,
    pod_path,
)
from sim.apiserver.errors import ApiError
from sim.clock import parse_rfc3339, rfc3339


@dataclass
class _QueueItem:
    deadline: datetime | None
    next_try: datetime
    failures: int = 0
    #: its pod is do-not-disrupt: only a write to it or a time of `wake_times` changes that
    held: bool = False


@dataclass
class TerminationController:
    cluster: Cluster
    #: the eviction queue: (namespace, name, uid) -> its item
    queue: dict[tuple[str, str, str], _QueueItem] = field(default_factory=dict)

    def queue_due(self) -> list[datetime]:
        """Each queued eviction's next try, but those held by do-not-disrupt: retrying one changes
        nothing until the pod is written (a driver steps on every write) or a time of `wake_times`
        comes (its do-not-disrupt duration ends, the termination timestamp forces it), so a driver on
        its own clock need not wake every 10 s for a pod that waits for days."""
        return [item.next_try for item in self.queue.values() if not item.held]

    def wake_times(self, nodes: list[Obj], claims: list[Obj]) -> list[datetime]:
        """When a deleting Node's drain changes with time alone, no write to wait for: a terminating
        pod becomes stuck (a minute past its deletionTimestamp) and stops holding the drain, a pod's
        own grace would outlast the termination timestamp (it is deleted, not evicted), a
        do-not-disrupt duration ends, Drained has held for MIN_DRAIN_SECONDS. A driver that steps
        the stand-in at these times (and on every write) sees what a one-second requeue sees."""
        tick = timedelta(milliseconds=1)  # the predicates compare strictly: just past the threshold
        times: list[datetime] = []
        for node in nodes:
            meta = meta_of(node)
            if not meta.get("deletionTimestamp") or FINALIZER not in (meta.get("finalizers") or []):
                continue
            claim = claim_for(node, claims)
            deadline = _termination_time(claim)
            for cond in ((claim or {}).get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Drained" and cond.get("status") != "True":
                    times.append(parse_rfc3339(cond["lastTransitionTime"]) + timedelta(seconds=MIN_DRAIN_SECONDS))
            for pod in self.cluster.items("/api/v1/pods", f"spec.nodeName={meta['name']}"):
                pod_meta = meta_of(pod)
                if pod_meta.get("deletionTimestamp"):
                    times.append(parse_rfc3339(pod_meta["deletionTimestamp"]) + timedelta(minutes=1) + tick)
                    continue
                grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
                if deadline is not None and grace is not None:
                    times.append(deadline - timedelta(seconds=int(grace)) + tick)
                ends = do_not_disrupt_ends(pod)
                if ends is not None:
                    times.append(ends)
        return times

    def finalize(self, node: Obj, claims: list[Obj], now: datetime) -> None:
        name = node["metadata"]["name"]
        if NODEPOOL_LABEL not in (meta_of(node).get("labels") or {}):
            return  # not managed by Karpenter
        claim = claim_for(node, claims)
        claim_name = claim["metadata"]["name"] if claim is not None else ""
        deleting = claim is None or meta_of(claim).get("deletionTimestamp")
        if not deleting and self.cluster.delete(f"{NODECLAIMS}/{claim_name}"):
            self.cluster.record(now, "nodeclaim-deleted", claim_name, f"node {name} is deleting")
        deadline = _termination_time(claim)
        if not self._taint(node, now):
            return
        if not self._drain(node, deadline, now):
            self._set_condition(claim, "Drained", "Unknown", "Draining", now)
            return
        if claim is not None and not self._drained_long_enough(claim, now):
            return
        provider = str((node.get("spec") or {}).get("providerID", ""))
        if claim is not None and not self.cluster.instance_gone(instance_id(provider), claim["metadata"]["name"], now):
            self._set_condition(claim, "InstanceTerminating", "True", "InstanceTerminating", now)
            return
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        if self.cluster.patch(f"{NODES}/{name}", patch, "application/strategic-merge-patch+json"):
            self.cluster.record(now, "node-finalized", name)
            self._collect_orphans(name, now)

    def _taint(self, node: Obj, now: datetime) -> bool:
        spec, meta = node.get("spec") or {}, meta_of(node)
        taints = spec.get("taints") or []
        has = any(t.get("key") == DISRUPTED_TAINT["key"] and t.get("effect") == "NoSchedule" for t in taints)
        if has and (meta.get("labels") or {}).get(EXCLUDE_BALANCERS) == "karpenter":
            return True
        new = [t for t in taints if t.get("key") != DISRUPTED_TAINT["key"]] + [dict(DISRUPTED_TAINT)]
        body = {
            "metadata": {"labels": {EXCLUDE_BALANCERS: "karpenter"}, "resourceVersion": meta["resourceVersion"]},
            "spec": {"taints": new},
        }
        if not self.cluster.patch(f"{NODES}/{meta['name']}", body):
            return False  # conflict: requeue
        self.cluster.record(now, "tainted", meta["name"], "karpenter.sh/disrupted:NoSchedule")
        return True

    def _drain(self, node: Obj, deadline: datetime | None, now: datetime) -> bool:
        """Queue what must leave; True when nothing waits (do-not-disrupt pods do wait)."""
        pods = self.cluster.items("/api/v1/pods", f"spec.nodeName={node['metadata']['name']}")
        waiting = [p for p in pods if drainable(p, now)]
        forced = [p for p in waiting if needs_force_delete(p, deadline, now)]
        graceful = [p for p in waiting if p not in forced]
        self._enqueue(forced, deadline, now)

        def tier(pod: Obj) -> int:
            critical = (pod.get("spec") or {}).get("priorityClassName") in CRITICAL
            return 2 * critical + daemon(pod)

        for level in range(4):
            group = [p for p in graceful if tier(p) == level]
            if group:
                self._enqueue(group, deadline, now)
                break
        return not waiting

    def _enqueue(self, pods: list[Obj], deadline: datetime | None, now: datetime) -> None:
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"])
            item = self.queue.get(key)
            if item is None:
                self.queue[key] = _QueueItem(deadline, now)
            elif deadline is not None and (item.deadline is None or deadline < item.deadline):
                item.deadline = deadline  # a later Add only ever tightens the deadline

    def _drained_long_enough(self, claim: Obj, now: datetime) -> bool:
        cond = next(
            (c for c in (claim.get("status") or {}).get("conditions") or [] if c.get("type") == "Drained"), None
        )
        if cond is None:
            self._set_condition(claim, "Drained", "Unknown", "Draining", now)
            return False
        if cond.get("status") == "True":
            return True
        if now - parse_rfc3339(cond["lastTransitionTime"]) < timedelta(seconds=MIN_DRAIN_SECONDS):
            return False
        self._set_condition(claim, "Drained", "True", "Drained", now)
        self.cluster.record(now, "drained", claim["metadata"]["name"])
        return True

    def _set_condition(self, claim: Obj | None, type_: str, status: str, reason: str, now: datetime) -> None:
        if claim is None:
            return
        conditions = list((claim.get("status") or {}).get("conditions") or [])
        old = next((c for c in conditions if c.get("type") == type_), None)
        if old is not None and old.get("status") == status:
            return
        new = {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": rfc3339(now)}
        conditions = [c for c in conditions if c.get("type") != type_] + [new]
        body = {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"conditions": conditions},
        }
        if self.cluster.patch(f"{NODECLAIMS}/{claim['metadata']['name']}/status", body):
            claim.setdefault("status", {})["conditions"] = conditions

    def _collect_orphans(self, node: str, now: datetime) -> None:
        """The pod garbage collector: pods bound to a Node that no longer exists are deleted."""
        for pod in self.cluster.items("/api/v1/pods", f"spec.nodeName={node}"):
            meta = pod["metadata"]
            options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
            try:
                if self.cluster.delete(pod_path(meta["namespace"], meta["name"]), options):
                    self.cluster.record(now, "pod-gc", pod_key(pod), f"node {node} is gone")
            except ApiError as err:
                if err.code != 409:
                    raise

    def run_queue(self, now: datetime) -> None:
        for key in sorted(k for k, item in self.queue.items() if item.next_try <= now):
            item = self.queue[key]
            if self._reconcile_pod(key, item, now):
                self.queue.pop(key, None)
            else:
                item.failures += 1
                # client-go's ItemExponentialFailureRateLimiter: base * 2^failures, capped at max
                # (it caps the exponent too: a pod held for days fails millions of times)
                delay = min(EVICTION_BASE_DELAY * 2.0 ** min(item.failures - 1, 64), EVICTION_MAX_DELAY)
                item.next_try = now + timedelta(seconds=delay)

    def _reconcile_pod(self, key: tuple[str, str, str], item: _QueueItem, now: datetime) -> bool:
        """One queue reconcile; True when the item is complete."""
        ns, name, uid = key
        pod = self.cluster.get(pod_path(ns, name))
        if pod is None or pod["metadata"]["uid"] != uid:
            return True
        if needs_force_delete(pod, item.deadline, now):
            assert item.deadline is not None
            grace = max(int((item.deadline - now).total_seconds()), 1)
            try:
                if self.cluster.delete(
                    pod_path(ns, name), {"gracePeriodSeconds": grace, "preconditions": {"uid": uid}}
                ):
                    self.cluster.record(
                        now, "force-deleted", f"{ns}/{name}", f"grace {grace}s, termination at {item.deadline}"
                    )
            except ApiError as err:
                if err.code != 409:
                    raise
            return True
        if not active(pod):
            return True
        item.held = not evictable(pod, now)
        if item.held:
            return False  # do-not-disrupt: stays queued, backing off
        return self._evict(ns, name, uid, now, str(pod["metadata"].get("resourceVersion", "")))

    def _evict(self, ns: str, name: str, uid: str, now: datetime, decided_on: str) -> bool:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            self.cluster.http().call("POST", f"{pod_path(ns, name)}/eviction", body)
        except ApiError as err:
            if err.code in (404, 409):
                return True
            if err.code == 429 or err.message.endswith(MULTIPLE_PDBS):
                self.cluster.record(now, "eviction-blocked", f"{ns}/{name}", err.message)
            return False
        self.cluster.record(now, "evicted", f"{ns}/{name}", decided_on=decided_on)
        return True


def _termination_time(claim: Obj | None) -> datetime | None:
    """The NodeClaim's termination timestamp (its deletion + terminationGracePeriod), if it has one."""
    annotations = (meta_of(claim).get("annotations") or {}) if claim else {}
    return parse_rfc3339(annotations[TERMINATION_TIMESTAMP]) if TERMINATION_TIMESTAMP in annotations else None
