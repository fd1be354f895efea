"""The gang tests' cluster: the seed's four-rank Indexed Job (`torchrun --nnodes=4`), one rank per GPU
node, a Spot warning for one rank's node, and the ranks the simulator's kubelet signalled."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sim import KubeSim
from sim.builders import gpu_node, nodepool
from sim.training_jobs import indexed_job_pod
from tests.integration import inputs
from tests.integration.conftest import World


def node_name(i: int) -> str:
    return f"ip-10-0-5-{10 + i}.us-west-2.compute.internal"


def instance(i: int) -> str:
    return f"i-0{i:016x}"


def gpu_nodes(sim: KubeSim, count: int) -> list[dict[str, Any]]:
    sim.create(nodepool("gpu-training"))
    return [sim.create(gpu_node(node_name(i), instance(i), ip=f"10.0.5.{10 + i}")) for i in range(count)]


def four_rank_job(world: World, mode: str = "signal:SIGUSR1", annotations: dict[str, str] | None = None) -> list[str]:
    """The seed's Indexed Job: `torchrun --nnodes=4`, one rank per GPU node."""
    nodes = gpu_nodes(world.sim, 4)
    keys = []
    for rank, node in enumerate(nodes):
        pod = world.sim.create(indexed_job_pod("llama-ft", rank, node, checkpoint=mode, annotations=annotations))
        keys.append(f"ml/{pod['metadata']['name']}")
    return keys


def rank_warning(world: World, i: int) -> dict[str, Any]:
    """The sample Spot warning, for rank ``i``'s node."""
    return inputs.spot_warning(world, instance(i), id=f"spot-{i}")


def signalled(world: World) -> Counter[str]:
    return Counter(f"{r.namespace}/{r.pod}" for r in world.sim.exec_log if r.command[:2] == ["kill", "-s"])
