"""Jobs, not pods (docs/training-jobs.md): a notice for one node of a distributed training job
checkpoints the whole job, once, through `handle_batch` against the simulator. The pods carry
the labels their controllers write (`sim.training_jobs`); the trainers acknowledge as a real
trainer does (`sim.actors.workloads`)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.domain.gangs import ASK, GROUP, LEADER
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch, handle_runbook
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps
from sim.builders import inference_pod
from sim.training_jobs import indexed_job_pod, jobset_pod
from tests.integration.conftest import World
from tests.integration.gang_cluster import four_rank_job, gpu_nodes, node_name, rank_warning, signalled


def asked_pods(results: list[dict[str, Any]]) -> Counter[str]:
    return Counter(a["pod"] for r in results for a in r["actions"] if a["type"] == "checkpoint-requested")


def test_spot_warning_for_one_rank_asks_every_rank_and_evicts_only_that_rank(world: World) -> None:
    # Given the seed's four-rank Indexed Job, one rank per node, each rank opted into SIGUSR1
    ranks = four_rank_job(world)
    # When a Spot warning arrives for rank 1's node
    result = handle_batch(parse_notices(rank_warning(world, 1)), world.deps()).to_json()
    # Then every rank was signalled once, and only rank 1 left, after acknowledging
    assert result["outcome"] == "handled", result["reason"]
    assert signalled(world) == Counter(ranks)
    assert world.pod(ranks[1]) is None
    assert all(world.pod(k) is not None for k in (ranks[0], ranks[2], ranks[3]))
    # And the result names the gang with every rank asked and acknowledged
    (gang,) = result["checkpoints"]
    assert (gang["gang"], gang["by"]) == ("ml/llama-ft", "job")
    assert sorted(gang["asked"]) == sorted(ranks) == sorted(gang["acknowledged"])
    assert gang["timed_out"] == []


def test_ranks_on_healthy_nodes_are_asked_and_otherwise_left_alone(world: World) -> None:
    ranks = four_rank_job(world)
    handle_batch(parse_notices(rank_warning(world, 1)), world.deps())
    # Then the other ranks' nodes are not cordoned, and the ranks carry no do-not-disrupt mark
    for i in (0, 2, 3):
        assert not world.node(node_name(i))["spec"].get("unschedulable")
    for key in (ranks[0], ranks[2], ranks[3]):
        pod = world.pod(key)
        assert pod is not None
        assert "karpenter.sh/do-not-disrupt" not in pod["metadata"]["annotations"]
        assert pod["metadata"]["annotations"]["gpuwarden.io/checkpoint-event-id"] == "spot-1"


def test_doomed_rank_leaves_only_after_the_slowest_rank_has_checkpointed(world: World) -> None:
    # Given rank 3 (on a healthy node) takes 6 s to acknowledge, the others 1 s
    ranks = four_rank_job(world)
    world.workloads.delays[ranks[3]] = 6.0
    # When rank 1's node gets a Spot warning
    result = handle_batch(parse_notices(rank_warning(world, 1)), world.deps()).to_json()
    # Then rank 1 was evicted after rank 3 acknowledged, not after its own acknowledgement
    evict = next(a for a in result["actions"] if a["type"] == "evict" and a["pod"] == ranks[1])
    slow_ack = isoparse(world.pod(ranks[3])["metadata"]["annotations"]["gpuwarden.io/checkpoint-done"])  # type: ignore[index]
    assert isoparse(evict["at"]) >= slow_ack - timedelta(seconds=1)  # the ack is written at second precision
    assert evict["reason"] == "checkpoint acknowledged"


def test_two_notices_for_two_nodes_of_one_job_at_the_same_moment_ask_each_rank_once(world: World) -> None:
    # Given the four-rank job, and Spot warnings for ranks 1 and 2 delivered at the same moment
    ranks = four_rank_job(world)
    results: list[dict[str, Any]] = []
    start = threading.Barrier(2)

    def deliver(i: int) -> None:
        start.wait()
        results.append(handle_batch(parse_notices(rank_warning(world, i)), world.deps()).to_json())

    threads = [threading.Thread(target=deliver, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    # Then each rank was asked exactly once, whichever invocation won each claim
    assert [r["outcome"] for r in results] == ["handled", "handled"], [r["reason"] for r in results]
    assert signalled(world) == Counter(ranks)
    assert asked_pods(results) == Counter(ranks)
    # And both doomed ranks left; the healthy ranks stayed
    assert world.pod(ranks[1]) is None
    assert world.pod(ranks[2]) is None
    assert world.pod(ranks[0]) is not None
    assert world.pod(ranks[3]) is not None


def test_a_warning_after_the_gang_acknowledged_asks_it_again(world: World) -> None:
    # Given rank 1's node was handled: every rank was asked and acknowledged
    ranks = four_rank_job(world)
    first = handle_batch(parse_notices(rank_warning(world, 1)), world.deps()).to_json()
    world.sim.clock.advance(30)
    # When a warning for rank 2's node arrives afterwards (its time after those acknowledgements)
    second = handle_batch(parse_notices(rank_warning(world, 2)), world.deps()).to_json()
    # Then the ranks still running are asked again, once, for the second warning: the checkpoint they
    # wrote before it does not hold what they trained since (docs/training-jobs.md)
    still_running = [ranks[0], ranks[2], ranks[3]]
    assert asked_pods([first]) == Counter(ranks)
    assert asked_pods([second]) == Counter(still_running)
    assert signalled(world) == Counter(ranks) + Counter(still_running)
    # And rank 2 left on the acknowledgement of the second warning's own request
    evict = next(a for a in second["actions"] if a["type"] == "evict" and a["pod"] == ranks[2])
    assert evict["reason"] == "checkpoint acknowledged"
    notes = world.pod(ranks[0])["metadata"]["annotations"]  # type: ignore[index]
    assert notes["gpuwarden.io/checkpoint-event-id"] == "spot-2"


def test_leader_mode_asks_only_the_jobset_leader_and_the_doomed_worker_waits_for_it(world: World) -> None:
    # Given a JobSet of 4 pods (one replicated Job, parallelism 4) asking only its leader
    nodes = gpu_nodes(world.sim, 4)
    keys = []
    for index, node in enumerate(nodes):
        pod = jobset_pod("pretrain", "workers", 0, index, node, annotations={ASK: "leader"})
        keys.append(f"ml/{pod['metadata']['name']}")
        world.sim.create(pod)
    world.workloads.delays[keys[0]] = 4.0
    # When the node of completion index 2 gets a Spot warning
    result = handle_batch(parse_notices(rank_warning(world, 2)), world.deps()).to_json()
    # Then only the leader (job-index 0, completion index 0) was signalled
    assert signalled(world) == Counter([keys[0]])
    (gang,) = result["checkpoints"]
    assert (gang["gang"], gang["by"], gang["asked"]) == ("ml/pretrain", "jobset", [keys[0]])
    # And the doomed worker, marked for Karpenter, left only once the leader acknowledged
    marked = [a["pod"] for a in result["actions"] if a["type"] == "do-not-disrupt"]
    assert marked == [keys[2]]
    evict = next(a for a in result["actions"] if a["type"] == "evict" and a["pod"] == keys[2])
    ack = isoparse(world.pod(keys[0])["metadata"]["annotations"]["gpuwarden.io/checkpoint-done"])  # type: ignore[index]
    assert isoparse(evict["at"]) >= ack - timedelta(seconds=1)


def test_explicit_group_across_deployment_free_pods_is_one_gang(world: World) -> None:
    # Given two trainers of different Jobs that declare one checkpoint group, and a Deployment's replicas
    nodes = gpu_nodes(world.sim, 2)
    a = world.sim.create(indexed_job_pod("gen", 0, nodes[0], annotations={GROUP: "rl-loop"}))
    b = world.sim.create(indexed_job_pod("reward", 0, nodes[1], annotations={GROUP: "rl-loop"}))
    serving = {"app": "serving"}
    for i, node in enumerate(nodes):
        world.sim.create(inference_pod(f"serve-{i}", node, labels=serving))
    # When node 0 gets a Spot warning
    result = handle_batch(parse_notices(rank_warning(world, 0)), world.deps()).to_json()
    # Then both trainers of the group were asked; the Deployment's replicas are no gang
    (gang,) = result["checkpoints"]
    assert (gang["gang"], gang["by"]) == ("ml/rl-loop", "group")
    assert sorted(gang["asked"]) == sorted(f"ml/{p['metadata']['name']}" for p in (a, b))


def test_bad_gang_input_is_reported_on_the_pod_and_the_pod_is_a_gang_of_one(world: World) -> None:
    # Given a four-rank job whose rank 1 has an invalid group and rank 2 an unknown ask value
    nodes = gpu_nodes(world.sim, 4)
    extra = {1: {GROUP: "not a label value!"}, 2: {ASK: "everyone"}}
    keys = []
    for rank, node in enumerate(nodes):
        pod = world.sim.create(indexed_job_pod("bad-ft", rank, node, annotations=extra.get(rank)))
        keys.append(f"ml/{pod['metadata']['name']}")
    # When rank 1's node gets a Spot warning
    result = handle_batch(parse_notices(rank_warning(world, 1)), world.deps()).to_json()
    # Then rank 1 is asked alone (a gang of one), and the bad input is in the result and an Event
    assert result["outcome"] == "handled", result["reason"]
    assert signalled(world) == Counter([keys[1]])
    invalid = [a for a in result["actions"] if a["type"] == "checkpoint-gang-invalid"]
    assert [a["pod"] for a in invalid] == [keys[1]]
    events = [e for e in world.sim.list("Event") if e["reason"] == "CheckpointGangInvalid"]
    assert [e["involvedObject"]["name"] for e in events] == [keys[1].split("/")[1]]
    assert result.get("checkpoints") is None


def test_two_leaders_in_one_gang_are_each_a_gang_of_one(world: World) -> None:
    nodes = gpu_nodes(world.sim, 3)
    keys = []
    for rank, node in enumerate(nodes):
        notes = {LEADER: "true"} if rank < 2 else {}
        pod = world.sim.create(indexed_job_pod("two-heads", rank, node, annotations=notes))
        keys.append(f"ml/{pod['metadata']['name']}")
    result = handle_batch(parse_notices(rank_warning(world, 2)), world.deps()).to_json()
    invalid = sorted(a["pod"] for a in result["actions"] if a["type"] == "checkpoint-gang-invalid")
    assert invalid == sorted(keys[:2])
    assert signalled(world) == Counter([keys[2]])


def test_runbook_checkpoint_of_one_node_asks_the_whole_job_and_touches_nothing_else(world: World) -> None:
    # Given the four-rank job
    ranks = four_rank_job(world, mode="annotate")
    # When an operator asks for a checkpoint of rank 2's node
    request = parse_runbook({"action": "checkpoint", "node": node_name(2), "reason": "before a driver upgrade"})
    result = handle_runbook(request, runbook_deps(world.deps(), request)).to_json()
    # Then every rank was asked (the same gang step as every notice), nothing cordoned or evicted
    assert result["outcome"] == "handled", result["reason"]
    assert asked_pods([result]) == Counter(ranks)
    assert result["checkpoints"][0]["gang"] == "ml/llama-ft"
    assert sorted(result["checkpoints"][0]["asked"]) == sorted(ranks)
    assert all(world.pod(k) is not None for k in ranks)
    assert not any(world.node(node_name(i))["spec"].get("unschedulable") for i in range(4))


def test_runbook_drain_of_one_node_waits_for_the_gang_before_evicting_its_rank(world: World) -> None:
    # Given the four-rank job, rank 0 (healthy node) 5 s to acknowledge
    ranks = four_rank_job(world, mode="annotate")
    world.workloads.delays[ranks[0]] = 5.0
    # When an operator drains rank 2's node (a voluntary kind, through the same pipeline)
    request = parse_runbook({"action": "drain", "node": node_name(2), "reason": "bad DIMM"})
    result = handle_runbook(request, runbook_deps(world.deps(), request)).to_json()
    # Then rank 2 left only after rank 0 acknowledged; the other ranks stay, their nodes untouched
    assert result["outcome"] == "handled", result["reason"]
    evict = next(a for a in result["actions"] if a["type"] == "evict" and a["pod"] == ranks[2])
    ack = isoparse(world.pod(ranks[0])["metadata"]["annotations"]["gpuwarden.io/checkpoint-done"])  # type: ignore[index]
    assert isoparse(evict["at"]) >= ack - timedelta(seconds=1)
    assert [world.pod(k) is None for k in ranks] == [False, False, True, False]


def test_a_gang_that_cannot_be_listed_still_has_its_doomed_rank_asked(world: World) -> None:
    # Given the four-rank job, and an API server that refuses LISTs of pods in the job's namespace
    ranks = four_rank_job(world)
    world.sim.faults.inject(status=403, method="GET", path="/api/v1/namespaces/ml/pods", message="forbidden")
    # When rank 1's node gets a Spot warning
    result = handle_batch(parse_notices(rank_warning(world, 1)), world.deps()).to_json()
    # Then rank 1 was still asked and checkpointed (as a gang of one), and the result says why
    assert result["outcome"] == "handled", result["reason"]
    assert signalled(world) == Counter([ranks[1]])
    invalid = [a for a in result["actions"] if a["type"] == "checkpoint-gang-invalid"]
    assert invalid
    assert invalid[0]["gang"] == "ml/llama-ft"
    evict = next(a for a in result["actions"] if a["type"] == "evict" and a["pod"] == ranks[1])
    assert evict["reason"] == "checkpoint acknowledged"


def test_a_later_notice_with_an_earlier_deadline_moves_the_gangs_request_up_without_asking_again(
    world: World,
) -> None:
    # Given every rank was asked by an operator's checkpoint with a 10-minute timeout, none has answered
    ranks = four_rank_job(world, annotations={"gpuwarden.io/checkpoint-timeout-seconds": "600"})
    for key in ranks:
        world.workloads.silent.add(key)
    request = parse_runbook({"action": "checkpoint", "node": node_name(0)})
    handle_runbook(request, runbook_deps(world.deps(), request))
    # When a Spot warning (2 minutes) arrives for rank 1's node
    event = rank_warning(world, 1)
    result = handle_batch(parse_notices(event), world.deps()).to_json()
    # Then nobody was signalled again, and every rank's request now asks for the Spot deadline
    assert signalled(world) == Counter(ranks)
    deadline = isoparse(result["deadline"])
    for key in (ranks[0], ranks[2], ranks[3]):
        notes = world.pod(key)["metadata"]["annotations"]  # type: ignore[index]
        assert isoparse(notes["gpuwarden.io/checkpoint-requested"]) == deadline.replace(microsecond=0)
    # And rank 1, its own request open, was waited for until that request ran out (not cut at
    # deadline - grace: a rank writing its part of a sharded checkpoint must not be stopped), and
    # left before the instance did
    evict = next(a for a in result["actions"] if a["type"] in ("evict", "delete") and a["pod"] == ranks[1])
    assert evict["reason"].startswith("checkpoint timed out")
    assert deadline - timedelta(seconds=30) < isoparse(evict["at"]) < deadline
