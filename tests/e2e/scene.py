"""What the e2e scenes share: the workloads (as users write them), a scene's namespaces and NodePools
(made for it, taken back after it), waiting for pods to run, and the checks every scene makes of
real Karpenter beside gpuwarden (docs/realplane.md, "The scenes")."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kubernetes import client

from gpuwarden.domain import annotations as ann
from realplane.plane.harness import Plane, dump, tour_nodepool
from tests.e2e.world import GPU, GPU_TOLERATION, GPUWARDEN_USER, Cluster, condition, rfc3339, running_and_ready

IMAGE = "registry.local/gpu-workload:1"
NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")
NODEPOOLS = ("karpenter.sh", "v1", "nodepools")


# ----------------------------------------------------------------------------- workloads


def gpu_container(name: str, gpus: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": IMAGE,
        "resources": {"requests": {GPU: str(gpus), "cpu": "1", "memory": "4Gi"}, "limits": {GPU: str(gpus)}},
    }


def pod_spec(gpus: int, node_selector: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": [GPU_TOLERATION], "containers": [gpu_container("main", gpus)], **more}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return spec


def deployment(
    name: str,
    namespace: str,
    replicas: int,
    gpus: int,
    *,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations or {}},
                "spec": pod_spec(gpus, node_selector),
            },
        },
    }


def pdb(name: str, namespace: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}},
    }


def job(
    name: str,
    namespace: str,
    gpus: int,
    *,
    annotations: dict[str, str] | None = None,
    ranks: int = 1,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A training Job (labelled app=<name>): one pod, or an Indexed Job of ``ranks`` pods that run
    together (``torchrun --nnodes=<ranks> --node_rank=$JOB_COMPLETION_INDEX``)."""
    spec: dict[str, Any] = {
        "backoffLimit": 6,
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": annotations or {}},
            "spec": pod_spec(gpus, node_selector, restartPolicy="Never"),
        },
    }
    if ranks > 1:
        spec |= {"completions": ranks, "parallelism": ranks, "completionMode": "Indexed"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def replicas_and_trainer(c: Cluster, serving: str, ml: str, checkpoint: str) -> tuple[list[dict[str, Any]], str]:
    """Two inference replicas behind a PDB that lets one go, and a 4-GPU trainer opted in to
    ``checkpoint``, running on one node real Karpenter launched: their pods (the trainer last) and
    that node's name."""
    c.apps.create_namespaced_deployment(serving, deployment("inference", serving, 2, 1))
    c.policy.create_namespaced_pod_disruption_budget(serving, pdb("inference", serving, 1))
    c.batch.create_namespaced_job(ml, job("trainer", ml, 4, annotations={ann.CHECKPOINT: checkpoint}))
    pods = running(c, serving, "app=inference", 2) + running(c, ml, "app=trainer", 1)
    node: str = pods[-1]["spec"]["nodeName"]
    assert {p["spec"]["nodeName"] for p in pods} == {node}, dump(pods)
    return pods, node


# ----------------------------------------------------------------------------- a scene's room


@contextlib.contextmanager
def scene_cluster(
    plane: Plane, namespaces: Sequence[str], nodepools: Sequence[dict[str, Any]] = ()
) -> Iterator[Cluster]:
    """The scene's namespaces and NodePools (Ready) on the session's plane; afterwards the workloads
    go first (else Karpenter launches nodes for their pending pods), then every NodeClaim (Karpenter
    drains and deletes its node), the scene's NodePools, and every other NodePool gets back the spec
    it had (a scene's windows or gpuwarden may have written it)."""
    c = Cluster(plane)
    before = {p["metadata"]["name"]: p["spec"] for p in c.custom.list_cluster_custom_object(*NODEPOOLS)["items"]}
    for ns in namespaces:
        c.namespace(ns)
    for pool in nodepools:
        c.custom.create_cluster_custom_object(*NODEPOOLS, pool)
    for pool in nodepools:
        name = pool["metadata"]["name"]
        plane.wait_for(f"NodePool {name} Ready", partial(_pool_ready, c, name))
    try:
        yield c
    finally:
        for ns in namespaces:
            with contextlib.suppress(client.ApiException):
                c.core.delete_namespace(ns)
        plane.wait_for("the scene's namespaces gone", lambda: not set(namespaces) & c.namespaces(), timeout=180)
        for claim in c.nodeclaims():
            with contextlib.suppress(client.ApiException):
                c.custom.delete_cluster_custom_object(*NODECLAIMS, claim["metadata"]["name"])
        plane.wait_for("the scene's NodeClaims and nodes gone", lambda: not c.nodeclaims() and not c.nodes(), 180)
        for pool in nodepools:
            c.custom.delete_cluster_custom_object(*NODEPOOLS, pool["metadata"]["name"])
        for name, spec in before.items():
            current = c.custom.get_cluster_custom_object(*NODEPOOLS, name)
            notes = current["metadata"].get("annotations") or {}
            ours = {k for k in notes if k.startswith("gpuwarden.io/")}
            if current["spec"] != spec or ours:
                current["spec"] = spec
                current["metadata"]["annotations"] = {k: v for k, v in notes.items() if k not in ours}
                c.custom.replace_cluster_custom_object(*NODEPOOLS, name, current)


def _pool_ready(c: Cluster, name: str) -> bool:
    return condition(c.custom.get_cluster_custom_object(*NODEPOOLS, name), "Ready") == "True"


def consolidating_pool(name: str, after: str = "5s", policy: str = "WhenEmpty", **overrides: Any) -> dict[str, Any]:
    """A tour NodePool whose empty nodes real Karpenter consolidates ``after`` so long (the tour's
    pool waits 10 min): a scene can see within seconds whether Karpenter leaves a node alone."""
    pool = tour_nodepool(name=name, **overrides)
    pool["spec"]["disruption"] |= {"consolidationPolicy": policy, "consolidateAfter": after}
    return pool


# ----------------------------------------------------------------------------- waiting


def running(c: Cluster, namespace: str, selector: str, count: int, timeout: float = 180) -> list[dict[str, Any]]:
    """``count`` pods of ``selector``, none deleting, all Running and Ready (bound by kube-scheduler,
    started by KWOK)."""

    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in c.pods(namespace, selector) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count and all(running_and_ready(p) for p in pods) else None

    return c.plane.wait_for(f"{count} {namespace} pods {selector} Running and Ready", ready, timeout=timeout)


def claims_naming_their_nodes(c: Cluster, count: int) -> list[dict[str, Any]]:
    """The NodeClaims, once there are ``count`` and each names its node (Karpenter opens a node to
    pods before it writes the claim's ``status.nodeName``: docs/realplane.md, "Findings")."""

    def named() -> list[dict[str, Any]] | None:
        claims = c.nodeclaims()
        return claims if len(claims) == count and all(cl.get("status", {}).get("nodeName") for cl in claims) else None

    return c.plane.wait_for(f"{count} NodeClaims naming their nodes", named, timeout=180)


def counted_by_karpenter(c: Cluster, count: int) -> list[dict[str, Any]]:
    """The NodeClaims, once there are ``count``, each names its node and Karpenter has initialized
    it: only then does Karpenter count the node in its NodePool's budgets (and so does gpuwarden,
    docs/cluster.md), so a voluntary action on a node that runs pods before that is refused as
    Karpenter's own disruption would pass it over."""

    def initialized() -> list[dict[str, Any]] | None:
        claims = c.nodeclaims()
        ok = len(claims) == count and all(
            cl.get("status", {}).get("nodeName") and condition(cl, "Initialized") == "True" for cl in claims
        )
        return claims if ok else None

    return c.plane.wait_for(f"{count} NodeClaims initialized", initialized, timeout=180)


def claim_ready(c: Cluster, name: str, timeout: float = 120) -> tuple[dict[str, Any], dict[str, Any]]:
    """NodeClaim ``name`` Launched, Registered, Initialized and Ready, and its node Ready."""

    def ready() -> dict[str, Any] | None:
        claim: dict[str, Any] = c.custom.get_cluster_custom_object(*NODECLAIMS, name)
        ok = all(condition(claim, t) == "True" for t in ("Launched", "Registered", "Initialized", "Ready"))
        return claim if ok and claim.get("status", {}).get("nodeName") else None

    claim = c.plane.wait_for(f"NodeClaim {name} Launched, Registered, Initialized and Ready", ready, timeout=timeout)
    node = c.node(claim["status"]["nodeName"])
    assert condition(node, "Ready") == "True", dump(node["status"])
    return claim, node


def requests_of(plane: Plane, user: str = GPUWARDEN_USER) -> list[dict[str, Any]]:
    return [e for e in plane.audit() if e["user"]["username"] == user]


def times(events: Sequence[dict[str, Any]], *, subresource: str | None, name: str, code: int) -> list[datetime]:
    """When the requests on object ``name`` (and ``subresource``) answered ``code`` completed."""
    return [
        rfc3339(e["stageTimestamp"])
        for e in events
        if e["objectRef"].get("subresource") == subresource
        and e["objectRef"].get("name") == name
        and e.get("responseStatus", {}).get("code") == code
    ]


def events_for(c: Cluster, kind: str, name: str, reason: str) -> list[dict[str, Any]]:
    """Kubernetes Events about ``kind``/``name`` with ``reason`` (any namespace)."""
    found = c.core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={name},reason={reason}")
    return [c.plain(e) for e in found.items if e.involved_object.kind == kind]


# ----------------------------------------------------------------------------- real Karpenter beside gpuwarden


def empty_node_held(c: Cluster, pool: str, since: datetime, timeout: float = 120) -> dict[str, Any]:
    """Real Karpenter's `DisruptionBlocked` Event on NodePool ``pool`` for an empty node, at or after
    ``since``: its emptiness consolidation held by a budget (the Event says which)."""

    def held() -> list[dict[str, Any]] | None:
        found = [
            e
            for e in events_for(c, "NodePool", pool, "DisruptionBlocked")
            if "Empty" in e["message"] and rfc3339(e["lastTimestamp"] or e["eventTime"]) >= since
        ]
        return found or None

    first: dict[str, Any] = c.plane.wait_for(f"Karpenter's Empty disruption held on {pool}", held, timeout=timeout)[0]
    return first


def replacement_claim(node: dict[str, Any]) -> str:
    replacement = node["metadata"].get("annotations", {}).get(ann.REPLACEMENT, "")
    assert replacement.startswith("nodeclaim/"), dump(node["metadata"])
    return str(replacement.removeprefix("nodeclaim/"))


POOL_KEYS = ("node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type")


def launched_as_written(claim: dict[str, Any], node: dict[str, Any], interrupted: dict[str, Any] | None = None) -> None:
    """Real Karpenter launched gpuwarden's NodeClaim as written: the node's labels meet every one of
    its requirements, it carries the NodePool's label, and (for a loss warning) it is not in the
    interrupted capacity pool (instance type + zone + capacity type)."""
    labels = node["metadata"]["labels"]
    for req in claim["spec"]["requirements"]:
        value, values = labels.get(req["key"]), req.get("values") or []
        ok = {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }.get(req["operator"], True)
        assert ok, f"node {node['metadata']['name']} {req['key']}={value} does not meet {req}"
    assert labels.get("karpenter.sh/nodepool") == claim["metadata"]["labels"]["karpenter.sh/nodepool"], dump(labels)
    if interrupted is not None:
        old = interrupted["metadata"]["labels"]
        assert tuple(labels.get(k) for k in POOL_KEYS) != tuple(old.get(k) for k in POOL_KEYS), dump(labels)


def karpenter_kept(plane: Plane, c: Cluster, claim_name: str, expected_claims: set[str]) -> dict[str, Any]:
    """What every scene asks of real Karpenter about gpuwarden's NodeClaim ``claim_name``: it is
    there and not deleting (no one deleted it: not consolidated away), not Drifted, not being
    disrupted, and the NodeClaims are exactly ``expected_claims`` (its provisioner launched no
    second node for the same pods)."""
    claim: dict[str, Any] = c.custom.get_cluster_custom_object(*NODECLAIMS, claim_name)
    assert not claim["metadata"].get("deletionTimestamp"), dump(claim["metadata"])
    deletes = [e for e in plane.audit() if e["verb"] == "delete" and e["objectRef"].get("resource") == "nodeclaims"]
    assert not [e for e in deletes if e["objectRef"].get("name") == claim_name], dump(deletes)
    assert condition(claim, "Drifted") != "True", dump(claim["status"])
    assert condition(claim, "DisruptionReason") is None, dump(claim["status"])
    node = c.node(claim["status"]["nodeName"])
    assert "karpenter.sh/disrupted" not in {t["key"] for t in node["spec"].get("taints") or []}, dump(node["spec"])
    assert {cl["metadata"]["name"] for cl in c.nodeclaims()} == expected_claims, dump(c.nodeclaims())
    return claim


# ----------------------------------------------------------------------------- the workload's side


class Acknowledger:
    """The trainers' side of an `annotate` checkpoint: every pod of ``selector`` that gpuwarden asked
    (`gpuwarden.io/checkpoint-requested`) and that has not answered gets `gpuwarden.io/checkpoint-done`
    once ``takes(pod)`` seconds have passed since it was first seen asked (a checkpoint's write), as
    a trainer watching its own pod would."""

    def __init__(self, plane: Plane, namespace: str, selector: str, takes: Callable[[str], float] = lambda _: 0.0):
        self.plane = plane
        self.namespace = namespace
        self.selector = selector
        self.takes = takes
        self.acknowledged: list[str] = []
        self._asked: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acknowledger", daemon=True)

    def __enter__(self) -> Acknowledger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def due(self, pod: str) -> bool:
        """Whether ``pod``'s trainer has what it answers on (here: the request on its pod)."""
        return True

    def _run(self) -> None:
        core: Any = client.CoreV1Api(self.plane.api_client())
        while not self._stop.wait(0.05):
            try:
                self._answer(core)
            except Exception:
                continue

    def _answer(self, core: Any) -> None:
        from gpuwarden.domain import annotations as ann

        for pod in core.list_namespaced_pod(self.namespace, label_selector=self.selector).items:
            notes = pod.metadata.annotations or {}
            name = pod.metadata.name
            if not notes.get(ann.CHECKPOINT_REQUESTED) or notes.get(ann.CHECKPOINT_DONE):
                continue
            first = self._asked.setdefault(name, time.monotonic())
            if time.monotonic() - first < self.takes(name) or not self.due(name):
                continue
            done = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = {"metadata": {"annotations": {ann.CHECKPOINT_DONE: done}}}
            with contextlib.suppress(client.ApiException):  # evicted meanwhile
                core.patch_namespaced_pod(name, self.namespace, body)
                self.acknowledged.append(name)


class SignalAcknowledger(Acknowledger):
    """The trainer side of a `signal:` checkpoint: KWOK runs gpuwarden's `kill -s USR1 1` through the
    harness's recording `kill` (``plane.signals``); a pod asked and not answered is acknowledged once
    a signal has arrived that no earlier acknowledgement used, as a trainer's signal handler would
    once its checkpoint is saved."""

    def due(self, pod: str) -> bool:
        return len(self.plane.signals.read_text().splitlines()) > len(self.acknowledged)
