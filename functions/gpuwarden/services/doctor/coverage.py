"""`checkpoint-coverage` (docs/cli.md, "doctor"; docs/protections.md): the training workloads whose
accelerator pods no checkpoint request reaches, and those whose grace a Spot notice cuts, on the
pods the doctor read once (`facts.ClusterFacts`).

A training workload is what runs the pod, by the labels its controller writes (a JobSet, a Kubeflow
job or TrainJob, a LeaderWorkerSet, a RayJob or RayCluster, a batch/v1 Job; the labels
`domain.gangs` reads). It is covered when one of its accelerator pods carries a valid
``gpuwarden.io/checkpoint`` (a gang is asked as one: docs/training-jobs.md); else every notice
evicts its pods without a handshake. A pod whose ``terminationGracePeriodSeconds`` is longer than
the 120 s a Spot warning leaves is stopped before its grace ends, whatever it does on SIGTERM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuwarden.domain.accelerators import pod_accelerators
from gpuwarden.domain.checkpoint import CheckpointSpec, checkpoint_spec
from gpuwarden.domain.gangs import JOB_NAME, JOBSET_NAME, KUBEFLOW_JOB_NAME, LWS_NAME, RAY_CLUSTER, TRAINJOB_NAME
from gpuwarden.domain.notice import SPOT_NOTICE_SECONDS
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import PodView
from gpuwarden.domain.wording import count
from gpuwarden.services.doctor.facts import ClusterFacts, Finding, Severity

CHECK = "checkpoint-coverage"
_SHOWN = 4
#: KubeRay writes these on the pods of a RayJob's cluster (ray-operator/controllers/ray/utils/constant.go).
RAY_ORIGIN_KIND = "ray.io/originated-from-crd"
RAY_ORIGIN_NAME = "ray.io/originated-from-cr-name"
#: Kubeflow training-operator v1 names the controller of a job's pods (kubeflow/common constants.go).
KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
_KUBEFLOW_KINDS = {
    "pytorchjob-controller": "PyTorchJob",
    "tfjob-controller": "TFJob",
    "mpijob-controller": "MPIJob",
    "xgboostjob-controller": "XGBoostJob",
    "paddlejob-controller": "PaddleJob",
    "jaxjob-controller": "JAXJob",
}
#: The controllers' labels, first match wins, and the kind of workload each names.
_WORKLOADS: tuple[tuple[str, str], ...] = (
    (JOBSET_NAME, "JobSet"),
    (KUBEFLOW_JOB_NAME, "Kubeflow job"),
    (TRAINJOB_NAME, "TrainJob"),
    (LWS_NAME, "LeaderWorkerSet"),
    (RAY_CLUSTER, "RayCluster"),
    (JOB_NAME, "Job"),
)
FIX_OPT_IN = (
    "add gpuwarden.io/checkpoint: annotate (or signal:SIGUSR1, exec:<command>, http:<port>/<path>) to the pod "
    "template of each, and acknowledge with gpuwarden.io/checkpoint-done (docs/training-jobs.md)"
)
FIX_GRACE = (
    f"save on SIGTERM within {SPOT_NOTICE_SECONDS} s, or opt in to the handshake so the checkpoint is asked for "
    "before the eviction"
)


def workload_of(pod: PodView) -> str | None:
    """``<kind> <namespace>/<name>`` of the training workload that runs ``pod`` (None: none)."""
    if pod.labels.get(RAY_ORIGIN_KIND) == "RayJob" and pod.labels.get(RAY_ORIGIN_NAME):
        return f"RayJob {pod.namespace}/{pod.labels[RAY_ORIGIN_NAME]}"
    for label, kind in _WORKLOADS:
        if value := pod.labels.get(label):
            if label == KUBEFLOW_JOB_NAME:
                kind = _KUBEFLOW_KINDS.get(pod.labels.get(KUBEFLOW_OPERATOR, ""), kind)
            return f"{kind} {pod.namespace}/{value}"
    if pod.owner_kind == "Job" and pod.owner_name:
        return f"Job {pod.namespace}/{pod.owner_name}"
    return None


@dataclass
class _Workload:
    name: str
    pods: list[PodView] = field(default_factory=list)
    covered: bool = False


def _training(pods: Sequence[PodView], policy: Policy) -> list[_Workload]:
    found: dict[str, _Workload] = {}
    timeout, allow_exec = policy.checkpoint.default_timeout_seconds, policy.checkpoint.allow_exec
    for pod in pods:
        name = workload_of(pod)
        if name is None or pod.finished or pod.is_daemonset or not pod_accelerators(pod).requests:
            continue
        workload = found.setdefault(name, _Workload(name))
        workload.pods.append(pod)
        workload.covered = workload.covered or isinstance(checkpoint_spec(pod, timeout, allow_exec), CheckpointSpec)
    return list(found.values())


def _shown(items: list[str]) -> str:
    return "; ".join(items[:_SHOWN]) + (f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def check_checkpoint_coverage(facts: ClusterFacts, policy: Policy) -> Finding:
    workloads = _training(facts.pods, policy)
    bare = [f"{w.name} ({count(len(w.pods), 'accelerator pod')})" for w in workloads if not w.covered]
    notice = f"longer than the {SPOT_NOTICE_SECONDS} s a Spot notice leaves"
    long_grace = [
        f"{w.name}: terminationGracePeriodSeconds {grace} s, {notice}"
        for w in workloads
        if (grace := max(p.grace_seconds for p in w.pods)) > SPOT_NOTICE_SECONDS
    ]
    if not bare and not long_grace:
        return Finding(
            CHECK, Severity.OK, f"{count(len(workloads), 'training workload')}, each reached by a checkpoint request"
        )
    said = []
    if bare:
        said.append(f"no checkpoint request reaches {_shown(bare)}: every notice evicts them without a handshake")
    if long_grace:
        said.append(_shown(long_grace))
    fixes = [fix for fix, found in ((FIX_OPT_IN, bare), (FIX_GRACE, long_grace)) if found]
    return Finding(CHECK, Severity.WARN, "; ".join(said), "; ".join(fixes))
