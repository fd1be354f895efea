"""Jobs that span several pods (a gang): who belongs together, who leads, who is asked (pure;
docs/training-jobs.md).

Membership, first match wins, within one namespace (the labels as each controller writes them;
the sources are in docs/training-jobs.md#how-gpuwarden-finds-the-gang):

=====================  ==============================================  ===============================
by                     label (or annotation) on the pod                leader
=====================  ==============================================  ===============================
``group``              annotation ``gpuwarden.io/checkpoint-group``    ``gpuwarden.io/checkpoint-leader``
``jobset``             ``jobset.sigs.k8s.io/jobset-name``              job-index 0 + completion index 0
``kubeflow``           ``training.kubeflow.org/job-name``              ``training.kubeflow.org/job-role: master``
``trainjob``           ``trainer.kubeflow.org/trainjob-name``          completion index 0 (its JobSet's)
``leaderworkerset``    ``leaderworkerset.sigs.k8s.io/name`` + group    ``leaderworkerset.sigs.k8s.io/worker-index: 0``
``ray``                ``ray.io/cluster``                              ``ray.io/node-type: head``
``job``                ``batch.kubernetes.io/job-name`` (> 1 pod)      completion index 0
=====================  ==============================================  ===============================

A pod that carries none of gpuwarden's checkpoint annotations is a gang of one: gpuwarden looks
for a pod's gang only when the pod opted into something (``checkpoint``, ``checkpoint-ask``,
``checkpoint-group`` or ``checkpoint-leader``), so a pod that did not costs no request. A
Deployment's (ReplicaSet's) replicas are never a gang: none of the labels above is theirs.

Bad input (a ``checkpoint-group`` that is not a valid label value, an unknown ``checkpoint-ask``,
``checkpoint-leader`` on two pods of one gang) is reported on the pod, and that pod is then a
gang of one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import CheckpointSpec, checkpoint_spec
from gpuwarden.domain.views import PodView

# -- what the workload's owner writes (pod annotations) ------------------------------------------
GROUP = ann.PREFIX + "checkpoint-group"
ASK = ann.PREFIX + "checkpoint-ask"
LEADER = ann.PREFIX + "checkpoint-leader"
ASK_VALUES = ("all", "leader")
#: Annotations that make gpuwarden look for the pod's gang (any of them).
OPT_IN = (ann.CHECKPOINT, ASK, GROUP, LEADER)

# -- what the controllers write (pod labels; batch's completion index is also an annotation) -----
JOB_NAME = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_JOB_ROLE = "training.kubeflow.org/job-role"
TRAINJOB_NAME = "trainer.kubeflow.org/trainjob-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"

By = Literal["group", "jobset", "kubeflow", "trainjob", "leaderworkerset", "ray", "job"]
AskMode = Literal["all", "leader"]

#: A label value (Kubernetes validation.IsValidLabelValue): empty, or ≤ 63 of [A-Za-z0-9-_.],
#: starting and ending with an alphanumeric. An empty group names no gang.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class GangRef:
    """Which gang a pod belongs to, and how to list its members: pods in ``namespace`` with every
    label of ``selector`` (an explicit group has no label: its namespace's pods, then
    `member_of` keeps those annotated with the same group)."""

    namespace: str
    name: str
    by: By
    selector: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """What the result and the Events call the gang: ``<namespace>/<name>``."""
        return f"{self.namespace}/{self.name}"

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.selector)


@dataclass(frozen=True)
class BadGangInput:
    """The pod's gang annotations cannot be read: reported on the pod; the pod is a gang of one."""

    pod: str
    reason: str


def _opted_in(pod: PodView) -> bool:
    return any(key in pod.annotations for key in OPT_IN)


def bad_input(pod: PodView) -> BadGangInput | None:
    """What is wrong with the pod's own gang annotations (None: nothing)."""
    group = pod.annotations.get(GROUP)
    if group is not None and not _LABEL_VALUE.match(group):
        why = f"{GROUP} {group!r} is not a valid label value (1-63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)"
        return BadGangInput(pod.key, why)
    ask = pod.annotations.get(ASK)
    if ask is not None and ask.strip() not in ASK_VALUES:
        return BadGangInput(pod.key, f"{ASK} {ask!r} is not one of {', '.join(ASK_VALUES)}")
    return None


#: The controllers' gang labels after an explicit group, in the contract's order (LWS apart: its
#: gang is one group of the set, named by a second label).
_BY_LABEL: tuple[tuple[str, By], ...] = (
    (JOBSET_NAME, "jobset"),
    (KUBEFLOW_JOB_NAME, "kubeflow"),
    (TRAINJOB_NAME, "trainjob"),
    (LWS_NAME, "leaderworkerset"),
    (RAY_CLUSTER, "ray"),
    (JOB_NAME, "job"),
)


def _lws(namespace: str, name: str, index: str | None) -> GangRef:
    if index is None:  # LWS always writes it; without it, the whole set is the safe reading
        return GangRef(namespace, name, "leaderworkerset", ((LWS_NAME, name),))
    # LWS names a group (and its leader pod) <lws>-<group index>
    return GangRef(namespace, f"{name}-{index}", "leaderworkerset", ((LWS_NAME, name), (LWS_GROUP_INDEX, index)))


def gang_of(pod: PodView) -> GangRef | BadGangInput | None:
    """The pod's gang, first match wins; None: a gang of one (not opted in, or no gang label)."""
    if not _opted_in(pod) or pod.is_daemonset or pod.is_mirror:
        return None
    bad = bad_input(pod)
    if bad is not None:
        return bad
    group = pod.annotations.get(GROUP)
    if group:
        return GangRef(pod.namespace, group, "group")
    for label, by in _BY_LABEL:
        value = pod.labels.get(label)
        if not value:
            continue
        if by == "leaderworkerset":
            return _lws(pod.namespace, value, pod.labels.get(LWS_GROUP_INDEX))
        return GangRef(pod.namespace, value, by, ((label, value),))
    return None


def gang_refs(pods: Iterable[PodView]) -> tuple[list[GangRef], list[BadGangInput]]:
    """The distinct gangs ``pods`` name (each to be listed once), and the pods with bad gang input."""
    refs: dict[tuple[str, str, str], GangRef] = {}
    bad: list[BadGangInput] = []
    for pod in pods:
        found = gang_of(pod)
        if isinstance(found, BadGangInput):
            bad.append(found)
        elif found is not None:
            refs.setdefault((found.namespace, found.by, found.name), found)
    return list(refs.values()), bad


def member_of(pod: PodView, ref: GangRef) -> bool:
    """Whether a listed pod belongs to ``ref`` (the list's selector, then first match wins again:
    a pod of the namespace whose own first match is another gang is not a member)."""
    if pod.namespace != ref.namespace or pod.finished or pod.is_daemonset or pod.is_mirror:
        return False
    if any(pod.labels.get(k) != v for k, v in ref.selector):
        return False
    if ref.by == "group":
        return pod.annotations.get(GROUP) == ref.name
    return GROUP not in pod.annotations or not pod.annotations[GROUP]


def _index(pod: PodView, key: str) -> str | None:
    return pod.labels.get(key, pod.annotations.get(key))


def _structural_leader(pod: PodView) -> bool:
    """The leader as its controller marks it (any of the rules: a gang has one controller)."""
    labels = pod.labels
    if labels.get(KUBEFLOW_JOB_ROLE) == "master":
        return True
    if labels.get(RAY_NODE_TYPE) == "head":
        return True
    if LWS_WORKER_INDEX in labels:
        return labels[LWS_WORKER_INDEX] == "0"
    if _index(pod, COMPLETION_INDEX) == "0":
        return _index(pod, JOBSET_JOB_INDEX) in (None, "0")
    return False


@dataclass(frozen=True)
class Gang:
    """One gang as listed now: its members (finished pods left out), how it is asked, its leader."""

    ref: GangRef
    members: tuple[PodView, ...]
    mode: AskMode = "all"
    leader: PodView | None = None
    #: Why, in leader mode, no leader was found: every opted-in member is asked instead.
    no_leader: str | None = None
    #: Members left out as bad input (each handled as a gang of one), with the reason.
    excluded: tuple[BadGangInput, ...] = ()

    @property
    def key(self) -> str:
        return self.ref.key

    def spec(self, pod: PodView, default_timeout: int, allow_exec: bool) -> CheckpointSpec | None:
        spec = checkpoint_spec(pod, default_timeout, allow_exec)
        return spec if isinstance(spec, CheckpointSpec) else None

    def to_ask(
        self, default_timeout: int = 60, allow_exec: bool = True, *, leaving_too: bool = False
    ) -> list[tuple[PodView, CheckpointSpec]]:
        """Who is asked: every opted-in member, or only the leader; a pod already terminating is not
        asked (``leaving_too``: counted all the same, for what the gang's checkpoint stands on)."""
        if self.mode == "leader" and self.leader is not None:
            candidates: Iterable[PodView] = (self.leader,)
        else:
            candidates = self.members
        return [
            (pod, spec)
            for pod in candidates
            if pod.started  # a rank not started yet (a replacement, Pending) has nothing to save
            and (leaving_too or not pod.terminating)
            and (spec := self.spec(pod, default_timeout, allow_exec)) is not None
        ]


def _leader(members: Sequence[PodView]) -> tuple[PodView | None, str | None]:
    explicit = [p for p in members if p.annotations.get(LEADER) == "true"]
    if len(explicit) == 1:
        return explicit[0], None
    found = [p for p in members if _structural_leader(p)]
    if len(found) > 1:  # a JobSet with several replicated Jobs: the job-global-index says which
        found = [p for p in found if _index(p, JOBSET_GLOBAL_INDEX) == "0"] or found
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, f'no pod is its leader ({LEADER}: "true", or the controller\'s index 0 / master / head)'
    return None, f"{len(found)} pods look like its leader ({', '.join(p.key for p in found[:4])}): set {LEADER}"


def form_gang(ref: GangRef, listed: Iterable[PodView]) -> Gang:
    """The gang ``ref`` from the pods a LIST found: members, bad input left out, mode, leader."""
    members: list[PodView] = []
    excluded: list[BadGangInput] = []
    for pod in listed:
        if not member_of(pod, ref):
            continue
        bad = bad_input(pod)
        if bad is not None:
            excluded.append(bad)
        else:
            members.append(pod)
    leaders = [p for p in members if p.annotations.get(LEADER) == "true"]
    if len(leaders) > 1:
        why = f"{LEADER} is set on {len(leaders)} pods of gang {ref.key} ({', '.join(p.key for p in leaders[:4])})"
        excluded += [BadGangInput(p.key, why) for p in leaders]
        members = [p for p in members if p not in leaders]
    members.sort(key=lambda p: p.key)
    asks = {p.annotations.get(ASK, "all").strip() for p in members}
    mode: AskMode = "leader" if "leader" in asks else "all"
    leader, no_leader = _leader(members)
    return Gang(ref, tuple(members), mode, leader, no_leader if mode == "leader" else None, tuple(excluded))


def is_gang(gang: Gang) -> bool:
    """A Job that runs one pod is not a gang (nor is any label gang that lists one pod); an explicit
    group is one, whatever its size, because its owner said so."""
    return gang.ref.by == "group" or len(gang.members) > 1


def zones_of(gang: Gang, zone_of_node: Mapping[str, str | None]) -> set[str]:
    """The zones the gang's members run in (for `doctor`: a gang spread over several zones)."""
    return {z for p in gang.members if p.node_name and (z := zone_of_node.get(p.node_name))}
