"""GPU-idle reclaims only what will not come straight back (kinds/gpu_idle/reschedule.py)."""

from __future__ import annotations

from typing import Any

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.kinds.registry import POLICY
from gpuwarden.services.dispatch import handle_batch
from sim import builders as b
from tests.integration.conftest import World
from tests.integration.gpu_idle_cluster import IDLE, contributor_event, node_events, put_utilization

IDLE_NODE, IDLE_INSTANCE = "ip-10-0-1-23.us-west-2.compute.internal", "i-0abc1234def567890"
OTHER, OTHER_INSTANCE = "ip-10-0-7-1.us-west-2.compute.internal", "i-0aaaabbbbcccc1111"
POOL = "gpu-notebooks"


def notebook(world: World, name: str, node: str, *, owner: Any) -> None:
    gpu = {"requests": {b.GPU: "1"}, "limits": {b.GPU: "1"}}
    containers = [{"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook", "resources": gpu}]
    world.sim.create(b.pod(name, node, "research", owner=owner, containers=containers))


def cluster(world: World, *, other_busy: bool, owner: Any) -> None:
    """Two 1-GPU notebook nodes; the idle one holds a notebook, the other one holds one or not."""
    world.sim.create(b.nodepool(POOL))
    for name, instance in ((IDLE_NODE, IDLE_INSTANCE), (OTHER, OTHER_INSTANCE)):
        node = world.sim.create(b.gpu_node(name, instance, nodepool=POOL, instance_type="g5.2xlarge", gpus=1))
        world.sim.create(b.nodeclaim_for(node))
    notebook(world, "jupyter-ada-0", IDLE_NODE, owner=owner)
    if other_busy:
        notebook(world, "jupyter-bob-0", OTHER, owner=("apps/v1", "StatefulSet", "jupyter-bob"))
    put_utilization(IDLE_INSTANCE, IDLE_NODE, IDLE)


def reclaim(world: World) -> dict[str, Any]:
    policy = POLICY.model_validate({"cluster": "ml-prod", "gpu_idle": {}})
    return handle_batch(parse_notices(contributor_event(IDLE_NODE, IDLE_INSTANCE)), world.deps(policy)).to_json()


def test_a_statefulset_notebook_with_nowhere_else_to_go_keeps_its_node_and_is_named(world: World) -> None:
    # Given an idle notebook node whose notebook a StatefulSet recreates, and the pool's other GPU taken
    cluster(world, other_busy=True, owner=("apps/v1", "StatefulSet", "jupyter-ada"))
    # When its GPU-idle alarm fires
    result = reclaim(world)
    # Then the node is refused, the reason naming the pod and its owner
    assert result["outcome"] == "ignored", result
    assert (
        "research/jupyter-ada-0 (StatefulSet/jupyter-ada) would come straight back on new capacity" in result["reason"]
    )
    node = world.node(IDLE_NODE)
    assert not node["spec"].get("unschedulable")
    assert world.pod("research/jupyter-ada-0") is not None
    # and the idle GPU-hours that owner holds are an action and an Event on the node
    (held,) = [a for a in result["actions"] if a["type"] == "idle-gpus-held"]
    assert held["owner"] == "StatefulSet/jupyter-ada"
    assert held["idle_gpu_hours"] > 0
    reasons = [e["reason"] for e in node_events(world, IDLE_NODE)]
    assert "IdleGpusHeld" in reasons
    assert "DisruptionRefused" in reasons


def test_the_same_notebook_is_reclaimed_when_a_free_gpu_stays_for_it(world: World) -> None:
    cluster(world, other_busy=False, owner=("apps/v1", "StatefulSet", "jupyter-ada"))
    result = reclaim(world)
    assert result["outcome"] == "handled", result
    assert not [a for a in result["actions"] if a["type"] == "idle-gpus-held"]


def test_a_bare_notebook_pod_does_not_block_the_reclaim(world: World) -> None:
    # Given nothing recreates the notebook (a bare pod, as JupyterHub's KubeSpawner makes them)
    cluster(world, other_busy=True, owner=None)
    result = reclaim(world)
    assert result["outcome"] == "handled", result


def test_a_notebook_held_to_its_zone_by_its_ebs_volume_does_not_move_to_a_free_gpu_elsewhere(world: World) -> None:
    # Given the idle notebook node in us-west-2a whose notebook's home PVC is an EBS volume there,
    # and the pool's only free GPU in us-west-2c
    from tests.integration.scenarios import claim, ebs_volume

    world.sim.create(b.nodepool(POOL))
    for name, instance, zone in ((IDLE_NODE, IDLE_INSTANCE, "us-west-2a"), (OTHER, OTHER_INSTANCE, "us-west-2c")):
        node = world.sim.create(b.gpu_node(name, instance, zone, "g5.2xlarge", POOL, gpus=1))
        world.sim.create(b.nodeclaim_for(node))
    volume, home = ebs_volume("pv-home-ada", "us-west-2a"), claim("home-ada", "pv-home-ada")
    home["metadata"]["namespace"] = "research"
    world.sim.create(volume)
    world.sim.create(home)
    gpu = {"requests": {b.GPU: "1"}, "limits": {b.GPU: "1"}}
    containers = [{"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook", "resources": gpu}]
    pod = b.pod(
        "jupyter-ada-0", IDLE_NODE, "research", owner=("apps/v1", "StatefulSet", "jupyter-ada"), containers=containers
    )
    pod["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": "home-ada"}}]
    world.sim.create(pod)
    put_utilization(IDLE_INSTANCE, IDLE_NODE, IDLE)

    # When its GPU-idle alarm fires
    result = reclaim(world)

    # Then the free GPU in another zone is no place for it: the node is kept, the pod named
    assert result["outcome"] == "ignored", result
    assert "research/jupyter-ada-0 (StatefulSet/jupyter-ada) would come straight back" in result["reason"]
    assert world.pod("research/jupyter-ada-0") is not None
