"""PodDisruptionBudget arithmetic (as the disruption controller computes it) and the
``pods/eviction`` subresource (as the API server's eviction REST handler decides it).

Deviation: the real controller runs asynchronously and caches ``status``; here the status is
computed from the store on every read and every eviction, so it is never stale. Expected pods
come from the scale of each matching pod's controller (Deployment via its ReplicaSet,
ReplicaSet, StatefulSet) when that object is in the store; a pod without one counts as 1
(the real controller would refuse to compute a percentage or maxUnavailable for it).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from sim.apiserver import errors
from sim.apiserver.registry import Registry, ResourceType
from sim.apiserver.selectors import from_label_selector_object, matches
from sim.apiserver.store import Obj, Store

EVICTION_BLOCKED = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def pod_healthy(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and pod_ready(pod)


def pdb_selects(pdb: Obj, pod: Obj) -> bool:
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    selector = from_label_selector_object((pdb.get("spec") or {}).get("selector"))
    return selector is not None and matches(selector, pod["metadata"].get("labels"))


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


class Disruption:
    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.pods = registry.by_kind("pods")
        self.pdbs = registry.by_kind("poddisruptionbudgets")
        self.replicasets = registry.by_kind("replicasets")
        self.deployments = registry.by_kind("deployments")
        self.statefulsets = registry.by_kind("statefulsets")
        self._evict_lock = threading.Lock()  # the real server serializes via the PDB's resourceVersion

    # -------------------------------------------------------------- status

    def _controller_scale(self, namespace: str, ref: Obj) -> tuple[str, int] | None:
        kind, name = ref.get("kind"), str(ref.get("name"))
        table: dict[str, ResourceType] = {"ReplicaSet": self.replicasets, "StatefulSet": self.statefulsets}
        rtype = table.get(str(kind))
        if rtype is None:
            return None
        owner = self.store.find(rtype, namespace, name)
        if owner is None:
            return None
        if kind == "ReplicaSet":
            for up in owner["metadata"].get("ownerReferences") or []:
                if up.get("controller") and up.get("kind") == "Deployment":
                    dep = self.store.find(self.deployments, namespace, str(up.get("name")))
                    if dep is not None:
                        return f"Deployment/{dep['metadata']['uid']}", int(dep["spec"].get("replicas", 1))
        return f"{kind}/{owner['metadata']['uid']}", int((owner.get("spec") or {}).get("replicas", 1))

    def _expected(self, pods: list[Obj]) -> int:
        scales: dict[str, int] = {}
        loose = 0
        for pod in pods:
            ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            found = self._controller_scale(pod["metadata"]["namespace"], ref) if ref else None
            if found is None:
                loose += 1
            else:
                scales[found[0]] = found[1]
        return sum(scales.values()) + loose

    def compute_status(self, pdb: Obj) -> dict[str, Any]:
        ns = pdb["metadata"]["namespace"]
        pods, _ = self.store.list(self.pods, ns, lambda p: pdb_selects(pdb, p))
        spec = pdb.get("spec") or {}
        healthy = sum(1 for p in pods if pod_healthy(p))
        if spec.get("minAvailable") is not None:
            min_available = spec["minAvailable"]
            expected = len(pods) if isinstance(min_available, int) else self._expected(pods)
            desired = _scaled(min_available, expected)
        elif spec.get("maxUnavailable") is not None:
            expected = self._expected(pods)
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        else:
            expected, desired = len(pods), 0
        allowed = max(0, healthy - desired)
        status: dict[str, Any] = dict(pdb.get("status") or {})
        status.update(
            observedGeneration=pdb["metadata"].get("generation", 1),
            disruptionsAllowed=allowed,
            currentHealthy=healthy,
            desiredHealthy=desired,
            expectedPods=expected,
            conditions=[
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if allowed > 0 else "False",
                    "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                    "message": "",
                    "observedGeneration": pdb["metadata"].get("generation", 1),
                    "lastTransitionTime": pdb["metadata"].get("creationTimestamp"),
                }
            ],
        )
        return status

    def decorate(self, pdb: Obj) -> Obj:
        """A PDB as a reader sees it: status freshly computed."""
        pdb["status"] = self.compute_status(pdb)
        return pdb

    # -------------------------------------------------------------- eviction

    def evict(self, namespace: str, name: str, body: Obj | None) -> dict[str, Any]:
        with self._evict_lock:
            return self._evict(namespace, name, body or {})

    def _evict(self, namespace: str, name: str, body: Obj) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"name in URL does not match name in Eviction object: {meta['name']}")
        options = body.get("deleteOptions") or {}
        pod = self.store.get(self.pods, namespace, name)
        if self._can_ignore_pdb(pod):
            return self._delete(namespace, name, options)
        pdbs, _ = self.store.list(self.pdbs, namespace, lambda b: pdb_selects(b, pod))
        if len(pdbs) > 1:
            raise errors.ApiError(
                500,
                f"Internal error occurred: {MULTIPLE_PDBS}",
                "InternalError",
                {"causes": [{"message": MULTIPLE_PDBS}]},
            )
        if not pdbs:
            return self._delete(namespace, name, options)
        pdb = pdbs[0]
        status = self.compute_status(pdb)
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if not pod_ready(pod) and (
            policy == "AlwaysAllow"
            or (status["currentHealthy"] >= status["desiredHealthy"] and status["desiredHealthy"] > 0)
        ):
            return self._delete(namespace, name, options)
        if status["disruptionsAllowed"] <= 0:
            cause = (
                f"The disruption budget {pdb['metadata']['name']} needs {status['desiredHealthy']} "
                f"healthy pods and has {status['currentHealthy']} currently"
            )
            raise errors.ApiError(
                429,
                EVICTION_BLOCKED,
                "TooManyRequests",
                {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
            )
        return self._delete(namespace, name, options)

    @staticmethod
    def _can_ignore_pdb(pod: Obj) -> bool:
        phase = (pod.get("status") or {}).get("phase")
        return bool(pod["metadata"].get("deletionTimestamp")) or phase in ("Succeeded", "Failed", "Pending")

    def _delete(self, namespace: str, name: str, options: Obj) -> dict[str, Any]:
        grace = options.get("gracePeriodSeconds")
        self.store.delete(
            self.pods, namespace, name, None if grace is None else int(grace), options.get("preconditions")
        )
        return errors.success(201)
