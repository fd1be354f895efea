"""Distributed training as its controllers leave it: the seed's Indexed Job (one torchrun rank per
GPU node) and a JobSet's pods, with the labels and annotations their controllers write.

Labels, from the controllers' source and docs: the Job controller (Kubernetes >= 1.27) labels
each pod `batch.kubernetes.io/job-name`, `job-name`, `batch.kubernetes.io/controller-uid`,
`controller-uid`, and for Indexed Jobs `batch.kubernetes.io/job-completion-index` (also an
annotation); JobSet (kubernetes-sigs/jobset, docs "JobSet labels") adds
`jobset.sigs.k8s.io/jobset-name`, `…/replicatedjob-name`, `…/replicatedjob-replicas`,
`…/job-index`, `…/job-global-index`, and the annotation `jobset.sigs.k8s.io/restart-attempt`.
"""

from __future__ import annotations

from typing import Any

from sim.builders import GPU, _workload, owner_ref, pod

Obj = dict[str, Any]
JOB_NAME = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
TORCHRUN = "torchrun --nnodes={n} --nproc-per-node=8 --node_rank=$(JOB_COMPLETION_INDEX) train.py"


def indexed_job(name: str, ranks: int, namespace: str = "ml") -> Obj:
    """The seed's `batch/v1` Indexed Job: `ranks` pods, all at once, one GPU node each."""
    labels = {"job-name": name, JOB_NAME: name}
    obj = _workload("batch/v1", "Job", name, namespace, labels, None, {"parallelism": ranks, "completions": ranks})
    obj["spec"] |= {"completionMode": "Indexed", "backoffLimit": 0}
    obj["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return obj


def rank_pod(
    job: Obj,
    index: int,
    node: Obj | str,
    gpus: int = 8,
    checkpoint: str | None = "signal:SIGUSR1",
    grace: int = 60,
    extra_labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> Obj:
    """Rank ``index`` of an Indexed Job (its pod `<job>-<index>-<suffix>`, as the Job controller names it)."""
    meta = job["metadata"]
    name, namespace, uid = meta["name"], meta.get("namespace", "ml"), meta.get("uid", "")
    ranks = int(job["spec"].get("parallelism") or 1)
    annotations = {COMPLETION_INDEX: str(index)}
    if checkpoint:
        annotations["gpuwarden.io/checkpoint"] = checkpoint
    labels = {
        "job-name": name,
        JOB_NAME: name,
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
        COMPLETION_INDEX: str(index),
        **(extra_labels or {}),
    }
    resources = {"requests": {GPU: str(gpus), "cpu": "90", "memory": "1000Gi"}, "limits": {GPU: str(gpus)}}
    obj = pod(
        f"{name}-{index}-{_suffix(name, index)}",
        node,
        namespace,
        owner=job if uid else ("batch/v1", "Job", name),
        labels=labels,
        annotations=annotations,
        containers=[
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:24.12-py3",
                "command": ["/bin/sh", "-c", TORCHRUN.format(n=ranks)],
                "resources": resources,
            }
        ],
        grace=grace,
    )
    obj["spec"] |= {"hostname": f"{name}-{index}", "subdomain": name, "restartPolicy": "Never"}
    if node_selector:
        obj["spec"]["nodeSelector"] = dict(node_selector)
    return obj


def jobset_pod(
    jobset: str,
    replicated_job: str,
    job_index: int,
    completion_index: int,
    node: Obj | str,
    replicas: int,
    pods_per_job: int,
    gpus: int = 8,
    checkpoint: str | None = "signal:SIGUSR1",
    namespace: str = "ml",
) -> Obj:
    """One pod of a JobSet's child Job `<jobset>-<replicatedJob>-<jobIndex>`."""
    job_name = f"{jobset}-{replicated_job}-{job_index}"
    job = indexed_job(job_name, pods_per_job, namespace)
    job["metadata"]["uid"] = ""
    extra = {
        JOBSET_NAME: jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-global-index": str(job_index),
    }
    obj = rank_pod(job, completion_index, node, gpus=gpus, checkpoint=checkpoint, extra_labels=extra)
    obj["metadata"]["annotations"]["jobset.sigs.k8s.io/restart-attempt"] = "0"
    obj["metadata"]["ownerReferences"] = [owner_ref(("batch/v1", "Job", job_name))]
    return obj


def _suffix(name: str, index: int) -> str:
    """The 5 random characters the API server appends to a generateName (deterministic here)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    seed = sum(ord(c) for c in f"{name}/{index}")
    return "".join(alphabet[(seed * (i + 7)) % len(alphabet)] for i in range(5))
