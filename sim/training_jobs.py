"""Pods of distributed training jobs, labelled as their controllers label them (docs/training-jobs.md
lists the sources: Kubernetes batch/v1 types.go, JobSet api/jobset/v1alpha2/jobset_types.go,
Kubeflow common constants.go and Trainer v2, LeaderWorkerSet api/leaderworkerset/v1, KubeRay
ray-operator utils/constant.go).

Each builder returns a GPU training pod (`builders.training_pod`) whose labels and annotations are
the controller's, plus the gpuwarden annotations a pod template would carry (``annotations``).
"""

from __future__ import annotations

import hashlib

from sim.apiserver.store import Obj
from sim.builders import _uid, training_pod

# batch/v1 (k8s.io/api/batch/v1/types.go): labels on every pod of a Job; the completion index is an
# annotation, and (PodIndexLabel, on by default since 1.28) a label too.
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def _suffix(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:5]


def _with(pod: Obj, labels: dict[str, str], annotations: dict[str, str]) -> Obj:
    pod["metadata"]["labels"].update(labels)
    pod["metadata"]["annotations"].update(annotations)
    return pod


def job_labels(job: str, namespace: str) -> dict[str, str]:
    """What the Job controller puts on every pod of Job ``job`` (old and new spellings)."""
    uid = _uid("Job", f"{namespace}/{job}")
    return {JOB_NAME: job, CONTROLLER_UID: uid, "job-name": job, "controller-uid": uid}


def indexed_job_pod(
    job: str,
    index: int,
    node: Obj | str,
    namespace: str = "ml",
    checkpoint: str | None = "signal:SIGUSR1",
    annotations: dict[str, str] | None = None,
    gpus: int = 8,
) -> Obj:
    """Rank ``index`` of an Indexed Job (pod name ``<job>-<index>-<random>``, as the controller names it)."""
    name = f"{job}-{index}-{_suffix(job, index)}"
    pod = training_pod(
        name, node, gpus=gpus, checkpoint=checkpoint, namespace=namespace, owner=("batch/v1", "Job", job)
    )
    labels = job_labels(job, namespace) | {COMPLETION_INDEX: str(index)}
    return _with(pod, labels, {COMPLETION_INDEX: str(index), **(annotations or {})})


def jobset_pod(
    jobset: str,
    replicated_job: str,
    job_index: int,
    completion_index: int,
    node: Obj | str,
    namespace: str = "ml",
    checkpoint: str | None = "signal:SIGUSR1",
    annotations: dict[str, str] | None = None,
    global_index: int | None = None,
    gpus: int = 8,
) -> Obj:
    """A pod of a JobSet's child Job ``<jobset>-<replicatedJob>-<jobIndex>`` (JobSet writes its keys as
    labels and annotations; the child Job adds batch/v1's)."""
    job = f"{jobset}-{replicated_job}-{job_index}"
    name = f"{job}-{completion_index}-{_suffix(job, completion_index)}"
    pod = training_pod(
        name, node, gpus=gpus, checkpoint=checkpoint, namespace=namespace, owner=("batch/v1", "Job", job)
    )
    keys = {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-key": hashlib.sha256(f"{namespace}/{job}".encode()).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": str(job_index if global_index is None else global_index),
    }
    labels = keys | job_labels(job, namespace) | {COMPLETION_INDEX: str(completion_index)}
    return _with(pod, labels, keys | {COMPLETION_INDEX: str(completion_index), **(annotations or {})})


def pytorchjob_pod(
    job: str,
    replica_type: str,
    index: int,
    node: Obj | str,
    namespace: str = "ml",
    checkpoint: str | None = "signal:SIGUSR1",
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A Kubeflow training-operator v1 PyTorchJob pod ``<job>-<type>-<index>``; the master's role label
    is ``master`` (kubeflow/common pkg/apis/common/v1/constants.go)."""
    kind = replica_type.lower()
    pod = training_pod(
        f"{job}-{kind}-{index}",
        node,
        checkpoint=checkpoint,
        namespace=namespace,
        owner=("kubeflow.org/v1", "PyTorchJob", job),
    )
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": kind,
        "training.kubeflow.org/replica-index": str(index),
    }
    if kind == "master":
        labels["training.kubeflow.org/job-role"] = "master"
    return _with(pod, labels, dict(annotations or {}))


def lws_pod(
    lws: str,
    group: int,
    worker: int,
    node: Obj | str,
    namespace: str = "ml",
    size: int = 4,
    checkpoint: str | None = "signal:SIGUSR1",
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A LeaderWorkerSet pod: the leader ``<lws>-<group>`` (worker index 0), a worker
    ``<lws>-<group>-<worker>``; owned by the leader / workers StatefulSet."""
    leader = f"{lws}-{group}"
    name = leader if worker == 0 else f"{leader}-{worker}"
    owner = ("apps/v1", "StatefulSet", lws if worker == 0 else leader)
    pod = training_pod(name, node, checkpoint=checkpoint, namespace=namespace, owner=owner)
    labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": hashlib.sha1(f"{namespace}/{leader}".encode()).hexdigest(),  # noqa: S324
    }
    notes = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    if worker:
        notes["leaderworkerset.sigs.k8s.io/leader-name"] = leader
    return _with(pod, labels, notes | (annotations or {}))


def ray_pod(
    cluster: str,
    node_type: str,
    index: int,
    node: Obj | str,
    namespace: str = "ml",
    group: str = "gpu-workers",
    checkpoint: str | None = "signal:SIGUSR1",
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A KubeRay pod of RayCluster ``cluster`` (``node_type``: ``head`` or ``worker``)."""
    name = f"{cluster}-head-{_suffix(cluster)}" if node_type == "head" else f"{cluster}-{group}-worker-{index}"
    pod = training_pod(
        name, node, checkpoint=checkpoint, namespace=namespace, owner=("ray.io/v1", "RayCluster", cluster)
    )
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": "headgroup" if node_type == "head" else group,
        "ray.io/is-ray-node": "yes",
    }
    return _with(pod, labels, dict(annotations or {}))
