"""Simulated controllers that react to writes through ``KubeSim.on_change``.

``ReplicaSetReplacer``: when a pod owned by a ReplicaSet or StatefulSet is gone, create a
Running+Ready replacement on another schedulable node (a stand-in for the ReplicaSet
controller, the scheduler and the kubelet), so PDB-guarded drains can make progress exactly
as they do in a real cluster: one disruption, wait for the replacement, the next.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from sim.apiserver.errors import ApiError
from sim.builders import running_status

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim

Obj = dict[str, Any]


def tolerates(pod: Obj, taint: Obj) -> bool:
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") not in (None, "", taint.get("effect")):
            continue
        if tol.get("operator") == "Exists" and tol.get("key") in (None, "", taint.get("key")):
            return True
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def schedulable(node: Obj, pod: Obj) -> bool:
    """Could ``pod`` be scheduled on ``node``: not cordoned, every hard taint tolerated."""
    if (node.get("spec") or {}).get("unschedulable") or node["metadata"].get("deletionTimestamp"):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    return all(t.get("effect") == "PreferNoSchedule" or tolerates(pod, t) for t in taints)


class ReplicaSetReplacer:
    def __init__(self, sim: KubeSim, kinds: tuple[str, ...] = ("ReplicaSet", "StatefulSet")) -> None:
        self.sim = sim
        self.kinds = kinds
        self.created: list[str] = []  # "ns/name" of each replacement
        sim.on_change(self._on_change)

    def _on_change(self, kind: str, event: str, obj: Obj) -> None:
        if kind != "Pod" or event != "DELETED":
            return
        owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        if owner is None or owner.get("kind") not in self.kinds:
            return
        old_node = (obj.get("spec") or {}).get("nodeName")
        nodes = [n for n in self.sim.list("Node") if n["metadata"]["name"] != old_node and schedulable(n, obj)]
        if not nodes:
            return  # stays Pending in a real cluster; nothing to simulate
        target = min(nodes, key=self._load)
        name = obj["metadata"]["name"]  # a StatefulSet pod keeps its name
        if owner["kind"] == "ReplicaSet":
            digest = hashlib.sha256(f"{name}/{len(self.created)}".encode()).hexdigest()[:5]
            name = f"{owner['name']}-{digest}"
        meta = {
            k: v for k, v in obj["metadata"].items() if k in ("namespace", "labels", "annotations", "ownerReferences")
        }
        meta["name"] = name
        spec = dict(obj["spec"])
        spec["nodeName"] = target["metadata"]["name"]
        replacement = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": spec,
            "status": running_status(target, name, spec["containers"]),
        }
        self.sim.create(replacement)
        self.created.append(f"{meta['namespace']}/{name}")

    def _load(self, node: Obj) -> int:
        return len(self.sim.list("Pod", field_selector=f"spec.nodeName={node['metadata']['name']}"))


JOB_TRACKING = "batch.kubernetes.io/job-tracking"


class JobTracking:
    """The Job controller's part in a Job pod's deletion: it puts the ``batch.kubernetes.io/job-tracking``
    finalizer on every pod it creates and takes it off once it has counted the pod, which for a
    terminating pod is at once (Kubernetes' default ``podReplacementPolicy``, TerminatingOrFailed).
    Without it a Job pod copied from a real cluster would stay terminating for ever, waiting for a
    finalizer no one removes (docs/realplane.md, finding 12). The kubelet's grace period still
    applies: the pod goes when it ends."""

    def __init__(self, sim: KubeSim) -> None:
        self.sim = sim
        sim.on_change(self._on_change)

    def _on_change(self, kind: str, event: str, obj: Obj) -> None:
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if kind != "Pod" or event == "DELETED" or not meta.get("deletionTimestamp") or JOB_TRACKING not in finalizers:
            return
        left = [f for f in finalizers if f != JOB_TRACKING]
        body = {"metadata": {"finalizers": left, "resourceVersion": meta["resourceVersion"]}}
        try:
            self.sim.patch_direct("Pod", meta["name"], body, meta.get("namespace"))
        except ApiError:  # a newer version (409) or gone (404): that change's own event comes next
            return


UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class UnschedulableTaint:
    """kube-controller-manager's node lifecycle controller (TaintNodesByCondition): a cordoned node
    (``spec.unschedulable``) carries ``node.kubernetes.io/unschedulable:NoSchedule``, and loses it
    when it is uncordoned. Seen on the real plane (docs/realplane.md, finding 12)."""

    def __init__(self, sim: KubeSim) -> None:
        self.sim = sim
        sim.on_change(self._on_change)

    def _on_change(self, kind: str, event: str, obj: Obj) -> None:
        if kind != "Node" or event == "DELETED":
            return
        taints = (obj.get("spec") or {}).get("taints") or []
        has = any(t.get("key") == UNSCHEDULABLE_TAINT["key"] for t in taints)
        cordoned = bool((obj.get("spec") or {}).get("unschedulable"))
        if has == cordoned:
            return
        kept = [t for t in taints if t.get("key") != UNSCHEDULABLE_TAINT["key"]]
        wanted = [*kept, dict(UNSCHEDULABLE_TAINT)] if cordoned else kept
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": {"taints": wanted}}
        try:
            self.sim.patch_direct("Node", obj["metadata"]["name"], body)
        except ApiError:  # a newer version (409) or gone (404): that change's own event comes next
            return
