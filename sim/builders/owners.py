"""The owners of pods: DaemonSets, Deployments, ReplicaSets, StatefulSets, Jobs; and PDBs."""

from __future__ import annotations

from sim.builders.base import Obj, owner_ref


def workload(
    api_version: str,
    kind: str,
    name: str,
    namespace: str,
    labels: dict[str, str],
    replicas: int | None,
    extra_spec: Obj | None = None,
    owner: Obj | None = None,
) -> Obj:
    spec: Obj = {
        "selector": {"matchLabels": dict(labels)},
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    spec |= extra_spec or {}
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [owner_ref(owner)]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def daemonset(name: str = "nvidia-device-plugin", namespace: str = "kube-system") -> Obj:
    return workload("apps/v1", "DaemonSet", name, namespace, {"app.kubernetes.io/name": name}, None)


def deployment(name: str, namespace: str, labels: dict[str, str], replicas: int) -> Obj:
    return workload("apps/v1", "Deployment", name, namespace, labels, replicas)


def replicaset(
    name: str, namespace: str, labels: dict[str, str], replicas: int, deployment_owner: Obj | None = None
) -> Obj:
    return workload("apps/v1", "ReplicaSet", name, namespace, labels, replicas, owner=deployment_owner)


def statefulset(name: str, namespace: str, labels: dict[str, str], replicas: int) -> Obj:
    return workload("apps/v1", "StatefulSet", name, namespace, labels, replicas, {"serviceName": name})


def job(name: str, namespace: str = "ml", parallelism: int = 1) -> Obj:
    labels = {"job-name": name, "batch.kubernetes.io/job-name": name}
    obj = workload(
        "batch/v1",
        "Job",
        name,
        namespace,
        labels,
        None,
        {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 6},
    )
    obj["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return obj


def pdb(
    name: str,
    namespace: str,
    match_labels: dict[str, str],
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> Obj:
    """A policy/v1 PodDisruptionBudget; set exactly one of min_available / max_unavailable."""
    spec: Obj = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
