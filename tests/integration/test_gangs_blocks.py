"""A Capacity Block's expiration warning over the nodes of one distributed job: one handshake per
gang for the whole block (docs/training-jobs.md), and the API requests a gang costs."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.actors.capacity_reservations import CapacityReservations
from sim.builders import gpu_node, nodepool
from sim.clock import rfc3339
from sim.training_jobs import jobset_pod
from sim.wiring import sim_deps
from tests.integration.conftest import World, load_event
from tests.integration.gang_cluster import four_rank_job, rank_warning, signalled
from tests.integration.scenarios import BLOCK, BLOCKS_POLICY

BEFORE_DRAIN = ("GET /api/v1/nodes", "PATCH /api/v1/nodes", "GET /api/v1/pods", "PATCH /api/v1/namespaces")


def block_gang(world: World, nodes: int = 4, per_node: int = 2) -> list[str]:
    """A JobSet of ``nodes`` x ``per_node`` ranks, every node in one Capacity Block."""
    world.sim.create(nodepool("gpu-training"))
    keys = []
    for i in range(nodes):
        body = gpu_node(
            f"ip-10-0-7-{i}.us-west-2.compute.internal",
            f"i-0b{i:015x}",
            instance_type="p5.48xlarge",
            capacity_type="reserved",
        )
        body["metadata"]["labels"] |= {
            "karpenter.k8s.aws/capacity-reservation-id": BLOCK,
            "karpenter.k8s.aws/capacity-reservation-type": "capacity-block",
        }
        node = world.sim.create(body)
        for c in range(per_node):
            pod = world.sim.create(jobset_pod("pretrain", "workers", i, c, node, checkpoint="annotate", gpus=4))
            keys.append(f"ml/{pod['metadata']['name']}")
    return keys


def test_a_capacity_block_expiry_over_one_gang_asks_each_of_its_pods_once(world: World) -> None:
    # Given a JobSet of 8 ranks on the block's 4 nodes
    ranks = block_gang(world)
    deps = sim_deps(
        world.sim, caller="test", policy=BLOCKS_POLICY, ledger=world.ledger, reservations=CapacityReservations()
    )
    now = world.sim.clock.now()
    event = load_event("capacity-block-expiration-warning.json")
    event["time"], event["detail"]["end-date"] = rfc3339(now), rfc3339(now + timedelta(minutes=40))
    # When EC2 warns that the block ends (one notice per node, handled side by side)
    result = handle_batch(parse_notices(event), deps).to_json()
    # Then each rank was asked exactly once, for the whole block
    assert result["outcome"] == "handled", result["reason"]
    requested = Counter(
        a["pod"] for r in result["results"] for a in r["actions"] if a["type"] == "checkpoint-requested"
    )
    assert requested == Counter(ranks)
    # And the block's answer names the gang once, every rank acknowledged, every rank gone
    (gang,) = result["checkpoints"]
    assert (gang["gang"], gang["by"]) == ("ml/pretrain", "jobset")
    assert sorted(gang["acknowledged"]) == sorted(ranks)
    assert all(world.pod(k) is None for k in ranks)


def test_a_gang_costs_one_list_more_than_the_node_alone(world: World) -> None:
    # Given the four-rank job; When a Spot warning arrives for rank 1's node
    four_rank_job(world)
    world.sim.clear_requests()
    result = handle_batch(parse_notices(rank_warning(world, 1)), world.deps()).to_json()
    assert result["outcome"] == "handled", result["reason"]
    requests = world.sim.requests
    # Then the gang was listed with one label-selector LIST in its namespace, never a cluster-wide LIST
    lists = [r for r in requests if r.method == "GET" and r.path == "/api/v1/namespaces/ml/pods"]
    assert lists
    assert all(r.query.get("labelSelector") == ["batch.kubernetes.io/job-name=llama-ft"] for r in lists)
    assert not [
        r for r in requests if r.method == "GET" and r.path == "/api/v1/pods" and "fieldSelector" not in r.query
    ]
    # And the urgent step (before the first drain round's GET of the node) listed it once
    first_round = next(
        i for i, r in enumerate(requests) if r.method == "GET" and r.path.startswith("/api/v1/nodes/") and i > 2
    )
    assert len([r for r in requests[:first_round] if r in lists]) <= 1
    assert Counter(signalled(world).values()) == Counter({1: 4})


def test_a_capacity_blocks_nodes_do_not_race_for_their_gangs_pods(world: World) -> None:
    # Given a JobSet of 12 ranks on the block's 4 nodes, the drains handed to the workflow (as deployed)
    ranks = block_gang(world, per_node=3)
    deps = sim_deps(
        world.sim, caller="test", policy=BLOCKS_POLICY, ledger=world.ledger, reservations=CapacityReservations()
    )
    deps.start_drain = lambda _state: None
    now = world.sim.clock.now()
    event = load_event("capacity-block-expiration-warning.json")
    event["time"], event["detail"]["end-date"] = rfc3339(now), rfc3339(now + timedelta(minutes=40))
    world.sim.clear_requests()
    # When EC2 warns that the block ends
    result = handle_batch(parse_notices(event), deps, drain_locally=False).to_json()
    # Then each node's run asked its own node's ranks, once: no write of a rank lost a race to another run
    assert result["outcome"] == "handled", result["reason"]
    pod_writes = [r for r in world.sim.requests if r.method == "PATCH" and "/pods/" in r.path]
    assert [r.path for r in pod_writes if r.status == 409] == []
    assert len(pod_writes) == len(ranks)
    # And the gang was listed once for the whole block, not once per node
    gang_lists = [r for r in world.sim.requests if r.method == "GET" and r.path == "/api/v1/namespaces/ml/pods"]
    assert len(gang_lists) == 1
    # And the block's one entry for the gang names every rank as asked, from every node's look
    (gang,) = result["checkpoints"]
    assert gang["asked"] == sorted(ranks)
