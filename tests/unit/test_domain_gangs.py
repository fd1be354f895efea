"""Gang membership, leader and progress on the label sets the controllers really write
(sources: docs/training-jobs.md#how-gpuwarden-finds-the-gang):

- batch/v1 Job (k8s.io/api batch/v1 types.go): `batch.kubernetes.io/job-name`,
  `batch.kubernetes.io/controller-uid`, the legacy `job-name` / `controller-uid`, and for Indexed
  Jobs `batch.kubernetes.io/job-completion-index` as annotation and (1.28+) label.
- JobSet (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go): `jobset-name`,
  `replicatedjob-name`, `job-index`, `job-global-index`, `job-key` as labels and annotations.
- Kubeflow training-operator v1 (kubeflow/common pkg/apis/common/v1/constants.go): `job-name`,
  `replica-type`, `replica-index`, `job-role: master`; Trainer v2: `trainer.kubeflow.org/trainjob-name`.
- LeaderWorkerSet (kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go): `name`,
  `group-index`, `worker-index` (0 is the leader), `group-key`; annotation `size`.
- KubeRay (ray-operator/controllers/ray/utils/constant.go): `ray.io/cluster`, `ray.io/node-type`
  (`head` / `worker`), `ray.io/group`, `ray.io/is-ray-node`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.drain import DrainContext, decide_pod
from gpuwarden.domain.gang_progress import holds, progress
from gpuwarden.domain.gangs import ASK, GROUP, LEADER, BadGangInput, GangRef, form_gang, gang_of, is_gang
from gpuwarden.domain.views import PodView

NOW = datetime(2026, 6, 1, 14, 0, tzinfo=UTC)
OPTED = {ann.CHECKPOINT: "signal:SIGUSR1"}


def pod(
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
    node: str = "n1",
    owner: tuple[str, str] = ("Job", "x"),
    namespace: str = "ml",
) -> PodView:
    return PodView(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        node_name=node,
        phase="Running",
        owner_kind=owner[0],
        owner_name=owner[1],
        labels=labels,
        annotations={**OPTED, **(annotations or {})},
        containers=("trainer",),
    )


def indexed_job(job: str, index: int, node: str = "n1", **notes: str) -> PodView:
    labels = {
        "batch.kubernetes.io/job-name": job,
        "batch.kubernetes.io/controller-uid": "5d3c1a2e",
        "job-name": job,
        "controller-uid": "5d3c1a2e",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    return pod(f"{job}-{index}-abcde", labels, {"batch.kubernetes.io/job-completion-index": str(index), **notes}, node)


def jobset(
    js: str,
    rjob: str,
    job_index: int,
    completion: int,
    *,
    global_index: int | None = None,
    notes: dict[str, str] | None = None,
) -> PodView:
    keys = {
        "jobset.sigs.k8s.io/jobset-name": js,
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-key": "9f2c",
    }
    if global_index is not None:
        keys["jobset.sigs.k8s.io/job-global-index"] = str(global_index)
    job = f"{js}-{rjob}-{job_index}"
    labels = keys | {"batch.kubernetes.io/job-name": job, "batch.kubernetes.io/job-completion-index": str(completion)}
    return pod(
        f"{job}-{completion}-x1y2z",
        labels,
        keys | {"batch.kubernetes.io/job-completion-index": str(completion), **(notes or {})},
    )


def pytorchjob(job: str, rtype: str, index: int, **notes: str) -> PodView:
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index),
    }
    if rtype == "master":
        labels["training.kubeflow.org/job-role"] = "master"
    return pod(f"{job}-{rtype}-{index}", labels, notes, owner=("PyTorchJob", job))


def lws(name: str, group: int, worker: int, **notes: str) -> PodView:
    labels = {
        "leaderworkerset.sigs.k8s.io/name": name,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": "8c1d",
    }
    pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    return pod(pod_name, labels, {"leaderworkerset.sigs.k8s.io/size": "4", **notes}, owner=("StatefulSet", name))


def ray(cluster: str, node_type: str, index: int = 0, **notes: str) -> PodView:
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": "gpu",
        "ray.io/is-ray-node": "yes",
    }
    return pod(f"{cluster}-{node_type}-{index}", labels, notes, owner=("RayCluster", cluster))


# -- membership -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (indexed_job("llama-ft", 1), GangRef("ml", "llama-ft", "job", (("batch.kubernetes.io/job-name", "llama-ft"),))),
        (
            jobset("pretrain", "workers", 2, 3),
            GangRef("ml", "pretrain", "jobset", (("jobset.sigs.k8s.io/jobset-name", "pretrain"),)),
        ),
        (
            pytorchjob("bert", "worker", 2),
            GangRef("ml", "bert", "kubeflow", (("training.kubeflow.org/job-name", "bert"),)),
        ),
        (
            lws("vllm", 1, 3),
            GangRef(
                "ml",
                "vllm-1",
                "leaderworkerset",
                (("leaderworkerset.sigs.k8s.io/name", "vllm"), ("leaderworkerset.sigs.k8s.io/group-index", "1")),
            ),
        ),
        (ray("rl", "worker", 3), GangRef("ml", "rl", "ray", (("ray.io/cluster", "rl"),))),
        (
            pod("t", {"trainer.kubeflow.org/trainjob-name": "ft"}),
            GangRef("ml", "ft", "trainjob", (("trainer.kubeflow.org/trainjob-name", "ft"),)),
        ),
    ],
)
def test_each_controllers_labels_name_its_gang(member: PodView, expected: GangRef) -> None:
    assert gang_of(member) == expected


def test_explicit_group_wins_over_every_controller_label() -> None:
    member = jobset("pretrain", "workers", 0, 0, notes={GROUP: "rl-loop"})
    assert gang_of(member) == GangRef("ml", "rl-loop", "group")


def test_jobset_pods_are_the_jobsets_gang_not_their_child_jobs() -> None:
    # Given a JobSet pod, which also carries its child Job's batch labels: first match wins
    ref = gang_of(jobset("pretrain", "workers", 1, 0))
    assert isinstance(ref, GangRef)
    assert ref.by == "jobset"


def test_a_pod_that_opted_into_nothing_is_a_gang_of_one_and_costs_no_list() -> None:
    member = indexed_job("llama-ft", 1)
    bare = PodView(**{**member.__dict__, "annotations": {}})
    assert gang_of(bare) is None


def test_deployment_replicas_are_never_a_gang() -> None:
    replica = pod("serve-7d9f-abcde", {"app": "serve", "pod-template-hash": "7d9f"}, owner=("ReplicaSet", "serve-7d9f"))
    assert gang_of(replica) is None


def test_a_job_listed_with_one_pod_is_not_a_gang_but_an_explicit_group_of_one_is() -> None:
    only = indexed_job("solo", 0)
    job_ref = gang_of(only)
    assert isinstance(job_ref, GangRef)
    assert not is_gang(form_gang(job_ref, [only]))
    grouped = indexed_job("solo", 0, **{GROUP: "mine"})
    group_ref = gang_of(grouped)
    assert isinstance(group_ref, GangRef)
    assert is_gang(form_gang(group_ref, [grouped]))


def test_listing_keeps_the_namespace_and_drops_finished_pods_and_other_groups() -> None:
    ref = GangRef("ml", "rl-loop", "group")
    a = indexed_job("gen", 0, **{GROUP: "rl-loop"})
    b = indexed_job("reward", 0, **{GROUP: "rl-loop"})
    other = indexed_job("else", 0, **{GROUP: "other"})
    done = PodView(**{**indexed_job("old", 0, **{GROUP: "rl-loop"}).__dict__, "phase": "Succeeded"})
    gang = form_gang(ref, [a, b, other, done])
    assert [p.key for p in gang.members] == sorted([a.key, b.key])


# -- the leader -------------------------------------------------------------------------------------


def leader_of(members: list[PodView]) -> str | None:
    ref = gang_of(members[0])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, members)
    return gang.leader.key if gang.leader else None


def test_indexed_job_leader_is_completion_index_zero() -> None:
    ranks = [indexed_job("llama-ft", i) for i in range(4)]
    assert leader_of(ranks) == ranks[0].key


def test_jobset_leader_is_job_index_zero_and_completion_index_zero() -> None:
    pods = [jobset("pretrain", "workers", j, c) for j in range(2) for c in range(2)]
    assert leader_of(pods) == jobset("pretrain", "workers", 0, 0).key


def test_jobset_with_two_replicated_jobs_uses_the_global_index() -> None:
    driver = jobset("mpi", "driver", 0, 0, global_index=0)
    worker = jobset("mpi", "workers", 0, 0, global_index=1)
    assert leader_of([worker, driver]) == driver.key


def test_kubeflow_v1_leader_is_the_master() -> None:
    pods = [pytorchjob("bert", "worker", i) for i in range(3)] + [pytorchjob("bert", "master", 0)]
    assert leader_of(pods) == pytorchjob("bert", "master", 0).key


def test_leaderworkerset_leader_is_worker_index_zero_of_its_group() -> None:
    pods = [lws("vllm", 1, w) for w in range(4)]
    assert leader_of(pods) == lws("vllm", 1, 0).key


def test_ray_leader_is_the_head() -> None:
    pods = [ray("rl", "worker", i) for i in range(3)] + [ray("rl", "head")]
    assert leader_of(pods) == ray("rl", "head").key


def test_explicit_leader_annotation_wins() -> None:
    pods = [indexed_job("llama-ft", i, **({LEADER: "true"} if i == 2 else {})) for i in range(4)]
    assert leader_of(pods) == pods[2].key


def test_leader_annotation_on_two_pods_leaves_both_out_as_bad_input() -> None:
    pods = [indexed_job("llama-ft", i, **({LEADER: "true"} if i < 2 else {})) for i in range(4)]
    ref = gang_of(pods[3])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, pods)
    assert sorted(b.pod for b in gang.excluded) == sorted(p.key for p in pods[:2])
    assert [p.key for p in gang.members] == [pods[2].key, pods[3].key]


def test_leader_mode_without_a_leader_asks_every_opted_in_pod() -> None:
    pods = [pytorchjob("bert", "worker", i, **{ASK: "leader"}) for i in range(3)]
    ref = gang_of(pods[0])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, pods)
    assert gang.mode == "leader"
    assert gang.no_leader is not None
    assert len(gang.to_ask()) == 3


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "notes",
    [{GROUP: "not a label value!"}, {GROUP: "-starts-with-dash"}, {GROUP: "x" * 64}, {ASK: "everyone"}],
)
def test_bad_gang_input_is_named_and_never_raises(notes: dict[str, str]) -> None:
    found = gang_of(indexed_job("llama-ft", 1, **notes))
    assert isinstance(found, BadGangInput)
    assert found.reason


# -- the gang's checkpoint, and what it means for its doomed pods ------------------------------------


def asked(by: datetime, event: str = "spot-1", done: bool = False) -> dict[str, str]:
    out = {ann.CHECKPOINT_REQUESTED: ann.rfc3339(by), ann.CHECKPOINT_EVENT: event}
    if done:
        out[ann.CHECKPOINT_DONE] = ann.rfc3339(NOW)
    return out


def test_doomed_rank_waits_for_the_slowest_rank_then_goes() -> None:
    # Given rank 1 (doomed) acknowledged, rank 3 (healthy node) asked by another notice and not yet
    ranks = [
        indexed_job("llama-ft", 0, node="n0", **asked(NOW + timedelta(seconds=40), done=True)),
        indexed_job("llama-ft", 1, node="n1", **asked(NOW + timedelta(seconds=40), done=True)),
        indexed_job("llama-ft", 2, node="n2", **asked(NOW + timedelta(seconds=40), done=True)),
        indexed_job("llama-ft", 3, node="n3", **asked(NOW + timedelta(seconds=40), event="spot-0")),
    ]
    ref = gang_of(ranks[1])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, ranks)
    deadline = NOW + timedelta(seconds=120)
    state = progress(gang, "spot-1", NOW, deadline)
    assert not state.checkpointed
    assert state.waiting == (ranks[3].key,)
    ctx = DrainContext("spot-1", True, deadline, NOW, gangs=holds(gang, state, [ranks[1]]))
    # Then rank 1 waits for its gang ...
    assert decide_pod(ranks[1], ctx).step == "wait"
    # ... and goes once rank 3's time is up
    later = NOW + timedelta(seconds=41)
    state = progress(gang, "spot-1", later, deadline)
    assert state.checkpointed
    assert state.timed_out == (ranks[3].key,)
    ctx = DrainContext("spot-1", True, deadline, later, gangs=holds(gang, state, [ranks[1]]))
    assert decide_pod(ranks[1], ctx).step == "evict"


def test_doomed_rank_goes_at_deadline_minus_grace_whatever_its_gang_does() -> None:
    ranks = [
        indexed_job("llama-ft", 0, node="n0", **asked(NOW + timedelta(seconds=600), event="maint")),
        indexed_job("llama-ft", 1, node="n1", **asked(NOW, done=True)),
    ]
    ref = gang_of(ranks[1])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, ranks)
    deadline = NOW + timedelta(seconds=30)  # the pod's grace is 30 s: it must start leaving now
    state = progress(gang, "spot-1", NOW, deadline)
    ctx = DrainContext("spot-1", True, deadline, NOW, gangs=holds(gang, state, [ranks[1]]))
    step = decide_pod(ranks[1], ctx)
    assert step.step == "evict"
    assert "not checkpointed by deadline - grace" in step.reason


def test_leader_mode_worker_is_not_asked_and_waits_for_the_leader() -> None:
    workers = [jobset("pretrain", "workers", 0, c, notes={ASK: "leader"}) for c in range(3)]
    ref = gang_of(workers[2])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, workers)
    state = progress(gang, "spot-1", NOW, None)
    assert state.unasked == (workers[0].key,)
    hold = holds(gang, state, [workers[2]])[workers[2].key]
    assert not hold.asked
    ctx = DrainContext("spot-1", True, NOW + timedelta(seconds=120), NOW, gangs={workers[2].key: hold})
    assert decide_pod(workers[2], ctx).step == "wait"


def test_a_rank_not_running_yet_is_not_asked_and_does_not_hold_its_gang() -> None:
    # Given rank 2 was replaced and its new pod is still Pending
    ranks = [indexed_job("llama-ft", i) for i in range(3)]
    pending = PodView(**{**ranks[2].__dict__, "phase": "Pending", "node_name": None})
    ref = gang_of(ranks[0])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, [ranks[0], ranks[1], pending])
    assert [p.key for p, _ in gang.to_ask()] == [ranks[0].key, ranks[1].key]


def test_a_pending_rank_on_the_doomed_node_is_told_why_it_is_not_asked() -> None:
    # Given rank 0, the gang's leader by its index, still Pending on the doomed node, in a gang that
    # asks every rank (no checkpoint-ask: leader), whose running ranks have checkpointed
    ranks = [indexed_job("llama-ft", i, **asked(NOW + timedelta(seconds=40), done=True)) for i in range(3)]
    leader = PodView(**{**ranks[0].__dict__, "phase": "Pending"})
    ref = gang_of(ranks[1])
    assert isinstance(ref, GangRef)
    gang = form_gang(ref, [leader, ranks[1], ranks[2]])
    assert gang.mode == "all"
    state = progress(gang, "spot-1", NOW, None)
    ctx = DrainContext("spot-1", True, NOW + timedelta(seconds=120), NOW, gangs=holds(gang, state, [leader]))
    # Then it goes without being asked, and the reason says it has not started (was: "gang asks only
    # its leader", said of the leader itself in a gang that asks everyone)
    step = decide_pod(leader, ctx)
    assert step.step == "evict"
    assert "Pending, nothing to save yet" in step.reason
    assert "leader" not in step.reason


def test_a_rank_its_controller_started_during_the_drain_is_not_asked() -> None:
    # Given a four-rank Job whose ranks all acknowledged, and a new rank 1 the Job controller made
    # after the drain began (its old rank 1 was evicted: seen on the real plane's sandbox)
    drain_began = NOW - timedelta(seconds=30)
    ranks = [
        indexed_job("llama-ft", i, node=f"n{i}", **asked(NOW + timedelta(seconds=40), done=True)) for i in range(4)
    ]
    new = replace(indexed_job("llama-ft", 1, node="n9"), name="llama-ft-1-fghij", created=NOW - timedelta(seconds=5))
    old_enough = replace(indexed_job("llama-ft", 1, node="n8"), name="llama-ft-1-klmno", created=drain_began)
    gang = form_gang(gang_of(ranks[0]), [*ranks[:1], *ranks[2:], new, old_enough])  # type: ignore[arg-type]
    state = progress(gang, "spot-1", NOW, None, joined_since=drain_began)
    # Then it is counted as joined since, not asked; a rank created before the drain still is
    assert state.joined == (new.key,)
    assert state.unasked == (old_enough.key,)
    assert state.as_result()["joined_since_asked"] == [new.key]
    # and without the drain's start, as before, it is asked
    assert new.key in progress(gang, "spot-1", NOW, None).unasked
