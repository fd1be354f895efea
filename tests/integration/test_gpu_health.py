"""gpu-unhealthy from node conditions (docs/gpu-signals.md): the GPU-health scan on the simulator,
with conditions written through the nodes/status subresource as the EKS node monitoring agent and
NVSentinel write them (samples: events/node-conditions-*.json), and the breaker."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import GpuHealthPolicy, Policy
from gpuwarden.kinds.gpu_unhealthy import use_case as gpu_health
from gpuwarden.kinds.registry import spec_of
from gpuwarden.services.dispatch import handle_scan
from sim import KubeSim
from sim.builders import gpu_node, job, nodepool, training_pod, trainium_node
from sim.clock import parse_rfc3339, rfc3339
from tests.integration.conftest import World
from tests.integration.gpu_health_reports import condition, failing, report

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def pool(sim: KubeSim, size: int, name: str = "gpu-training") -> list[str]:
    sim.create(nodepool(name))
    nodes = []
    for i in range(size):
        node = f"ip-10-0-{i // 200}-{i % 200 + 10}.us-west-2.compute.internal"
        sim.create(gpu_node(node, f"i-0{i:016x}", nodepool=name))
        nodes.append(node)
    return nodes


def policy(**gpu: Any) -> Policy:
    return Policy(cluster="ml-prod", gpu_health=GpuHealthPolicy(**gpu))


def test_a_failing_accelerated_hardware_condition_cordons_checkpoints_and_drains_before_repair(world: World) -> None:
    # Given a pool of 5 GPU nodes, one running an opted-in trainer, whose AcceleratedHardwareReady
    # turned False 30 s ago (XID 79), and another that reports a healthy GPU
    sim = world.sim
    nodes = pool(sim, 5)
    owner = sim.create(job("train", "ml"))
    sim.create(training_pod("train-0", nodes[0], checkpoint="annotate", owner=owner))
    since = failing(sim, nodes[0])
    report(sim, nodes[1], condition("nodes/eks-accelerated-hardware-healthy.json"))

    # When the scan runs
    result = handle_scan(None, world.deps()).to_json()

    # Then only the failing node is handled, as gpu-unhealthy, with the repair deadline
    assert result["kind"] == "gpu-unhealthy"
    assert result["outcome"] == "handled", result
    [one] = result["results"]
    assert one["node"] == nodes[0]
    assert one["event_id"] == f"gpu-unhealthy/{nodes[0]}/AcceleratedHardwareReady/{since}"
    node = world.node(nodes[0])
    assert node["spec"]["unschedulable"] is True
    assert {"key": ann.TAINT_KEY, "value": "gpu-unhealthy", "effect": "NoSchedule"} in node["spec"]["taints"]
    marks = node["metadata"]["annotations"]
    deadline = rfc3339(parse_rfc3339(since) + timedelta(minutes=10))
    assert marks[ann.DEADLINE] == deadline
    types = [a["type"] for a in one["actions"]]
    assert types[0] == "cordon"
    assert "checkpoint-requested" in types
    assert one["drain"]["done"] is True
    assert world.pod("ml/train-0") is None  # evicted after its acknowledgement
    assert "unschedulable" not in world.node(nodes[1])["spec"]


def test_a_second_scan_of_the_same_failure_writes_nothing(world: World) -> None:
    # Given a failing node a scan has already handled
    sim = world.sim
    nodes = pool(sim, 5)
    failing(sim, nodes[2])
    handle_scan(None, world.deps())
    before = len(sim.requests)

    # When the scan runs again
    result = handle_scan(None, world.deps()).to_json()

    # Then it reports the same failure as a duplicate and writes nothing
    assert result["outcome"] == "duplicate", result
    assert [r["outcome"] for r in result["results"]] == ["duplicate"]
    assert not [r for r in sim.requests[before:] if r.method in WRITES and "/events" not in r.path]


def test_a_new_failure_after_a_recovery_is_a_new_notice(world: World) -> None:
    # Given a node whose failure was handled, then released, and whose condition recovered
    sim = world.sim
    nodes = pool(sim, 5)
    first = failing(sim, nodes[0])
    handle_scan(None, world.deps())
    from gpuwarden.services.engine.writes import release_node

    release_node(world.deps().kube, nodes[0])
    report(sim, nodes[0], condition("nodes/eks-accelerated-hardware-healthy.json", lastTransitionTime=first))
    assert handle_scan(None, world.deps()).to_json()["results"] == []

    # When the GPU fails again later
    sim.clock.advance(120)
    second = failing(sim, nodes[0])
    result = handle_scan(None, world.deps()).to_json()

    # Then it is a new notice, with its own identity
    assert second != first
    assert result["outcome"] == "handled", result
    assert result["results"][0]["event_id"].endswith(second)


def test_nvsentinel_gpu_healthy_false_is_gpu_unhealthy(world: World) -> None:
    sim = world.sim
    nodes = pool(sim, 5)
    failing(sim, nodes[3], "nodes/nvsentinel-gpu-healthy-xid48.json")

    result = handle_scan(None, world.deps()).to_json()

    assert result["results"][0]["event_id"].startswith(f"gpu-unhealthy/{nodes[3]}/GPUHealthy/")
    assert world.node(nodes[3])["metadata"]["annotations"][ann.KIND] == Kind.GPU_UNHEALTHY.value


def test_the_breaker_holds_back_what_the_pool_has_no_room_for(world: World) -> None:
    # Given a pool of 10 nodes with 4 failing GPUs and the default 20 % (2 nodes)
    sim = world.sim
    nodes = pool(sim, 10)
    for node in nodes[:4]:
        failing(sim, node)

    # When the scan runs
    result = handle_scan(None, world.deps()).to_json()

    # Then 2 nodes are held, the other 2 are left untouched, with the reason and a Warning Event
    outcomes = sorted(r["outcome"] for r in result["results"])
    assert outcomes == ["handled", "handled", "ignored", "ignored"], result
    held = [n for n in nodes if world.node(n)["metadata"].get("annotations", {}).get(ann.KIND) == "gpu-unhealthy"]
    assert len(held) == 2
    for one in result["results"]:
        if one["outcome"] == "ignored":
            assert one["reason"].startswith("breaker: nodepool/gpu-training has 10 nodes")
            assert [a["type"] for a in one["actions"]] == ["held-back"]
            assert "unschedulable" not in world.node(one["node"])["spec"]
    events = sim.list("Event", namespace="default")
    assert any(e["reason"] == "GpuHealthHeldBack" and e["type"] == "Warning" for e in events)

    # And a later scan still holds them back while the pool is at its count
    again = handle_scan(None, world.deps()).to_json()
    assert sorted(r["outcome"] for r in again["results"]) == ["duplicate", "duplicate", "ignored", "ignored"]


def test_racing_invocations_never_hold_more_than_the_pool_allows(world: World) -> None:
    # Given a pool of 5 nodes (20 %: 1 node) and 3 failing nodes, each handled by its own invocation
    sim = world.sim
    nodes = pool(sim, 5)
    notices = []
    for node in nodes[:3]:
        failing(sim, node)
    deps = world.deps()
    from gpuwarden.domain.gpu_health import condition_notice, failing_condition

    for node in nodes[:3]:
        view = deps.kube.get_node(node)
        assert view is not None
        cond = failing_condition(view)
        assert cond is not None
        notices.append(condition_notice(view, cond, deps.policy.gpu_health, sim.clock.now()))

    # When they race
    barrier = threading.Barrier(len(notices))
    results: list[dict[str, Any]] = []

    def one(i: int) -> None:
        barrier.wait()
        results.append(
            gpu_health.handle_gpu_unhealthy(notices[i], world.deps(), spec_of(Kind.GPU_UNHEALTHY).hooks).to_json()
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(notices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then at most one node is held, and every other one is given back or untouched
    held = [n for n in nodes if world.node(n)["metadata"].get("annotations", {}).get(ann.KIND) == "gpu-unhealthy"]
    assert len(held) <= 1, results
    for node in nodes[:3]:
        if node not in held:
            assert world.node(node)["spec"].get("unschedulable") in (None, False)


def test_gpu_health_switched_off_scans_nothing(world: World) -> None:
    sim = world.sim
    nodes = pool(sim, 3)
    failing(sim, nodes[0])
    before = len(sim.requests)

    result = handle_scan(None, world.deps(policy(enabled=False))).to_json()

    assert result["outcome"] == "ignored"
    assert result["reason"] == "gpu_health.enabled is false in the policy"
    assert len(sim.requests) == before


@pytest.mark.parametrize("percent", [0])
def test_a_zero_percent_breaker_touches_no_node(world: World, percent: float) -> None:
    sim = world.sim
    nodes = pool(sim, 3)
    failing(sim, nodes[0])

    result = handle_scan(None, world.deps(policy(max_unhealthy_percent=percent))).to_json()

    assert result["results"][0]["outcome"] == "ignored"
    assert "unschedulable" not in world.node(nodes[0])["spec"]


# --------------------------------------------------------------------------- every accelerator node


def test_the_scan_finds_a_failing_gpu_node_without_gpu_feature_discovery_labels(world: World) -> None:
    # Given a GPU node run by the static NVIDIA device plugin: no nvidia.com/gpu.* labels, only its
    # capacity says it has GPUs; and a CPU node
    sim = world.sim
    sim.create(nodepool("gpu-training"))
    plain = gpu_node("ip-10-0-9-10.us-west-2.compute.internal", "i-0000000000000a010", nodepool="gpu-training")
    for key in ("nvidia.com/gpu.present", "nvidia.com/gpu.count"):
        plain["metadata"]["labels"].pop(key)
    sim.create(plain)
    cpu = gpu_node("ip-10-0-9-11.us-west-2.compute.internal", "i-0000000000000a011", nodepool=None, gpus=0)
    sim.create(cpu)
    since = failing(sim, plain["metadata"]["name"])
    before = len(sim.requests)

    # When the scan runs (default policy: no selector)
    result = handle_scan(None, world.deps()).to_json()

    # Then one LIST of every node, and the failing GPU node is handled; the CPU node is not a GPU node
    lists = [r for r in sim.requests[before:] if r.method == "GET" and r.path == "/api/v1/nodes"]
    assert len(lists) >= 1
    assert "labelSelector" not in lists[0].query
    [one] = result["results"]
    assert one["node"] == plain["metadata"]["name"]
    assert one["event_id"].endswith(since)
    assert result["reason"].startswith("scanned 1 GPU nodes (every node with an accelerator)"), result["reason"]


def test_the_scan_finds_a_failing_trainium_node(world: World) -> None:
    # Given a Trainium node (Neuron devices and EFA, no NVIDIA resource or label) whose
    # AcceleratedHardwareReady turned False (the node monitoring agent watches Neuron devices too)
    sim = world.sim
    sim.create(nodepool("trn-training"))
    trn = sim.create(trainium_node("ip-10-0-8-10.us-west-2.compute.internal", "i-0000000000000b010"))
    failing(sim, trn["metadata"]["name"])

    result = handle_scan(None, world.deps()).to_json()

    [one] = result["results"]
    assert one["node"] == trn["metadata"]["name"]
    assert one["outcome"] == "handled", one
    assert world.node(trn["metadata"]["name"])["spec"]["unschedulable"] is True
