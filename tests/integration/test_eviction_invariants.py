"""Eviction invariants, read off the simulator's request log: every eviction and delete names the
pod's UID, a delete never asks for less than 1 s of grace, a pod recreated under the same name is
never taken by a drain that listed its predecessor, and lower-priority pods are asked to leave
first (as the kubelet's graceful node shutdown orders them)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from gpuwarden.domain.ports import EvictionOutcome, KubePort
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim import KubeSim
from sim.apiserver.http_state import RequestRecord
from sim.builders import inference_pod, training_pod
from tests.integration.conftest import World
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import spot_node

_POD_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)(?P<sub>/eviction)?$")
OTHER_NODE = "ip-10-0-2-40.us-west-2.compute.internal"


def pod_writes(sim: KubeSim) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(evictions, deletes) of pods, in the order the simulator received them."""
    evictions, deletes = [], []
    for r in sorted(sim.requests, key=lambda r: r.started):
        match = _POD_PATH.match(r.path)
        if match and r.method == "POST" and match["sub"]:
            evictions.append(r)
        elif match and r.method == "DELETE" and not match["sub"]:
            deletes.append(r)
    return evictions, deletes


def pod_of(record: RequestRecord) -> str:
    match = _POD_PATH.match(record.path)
    assert match is not None
    return f"{match['ns']}/{match['name']}"


def uids(sim: KubeSim) -> dict[str, str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"] for p in sim.list("Pod")}


def recreate_elsewhere(sim: KubeSim, key: str) -> str:
    """The StatefulSet move: the pod is gone and a new one (new UID) runs under its name on another node."""
    namespace, name = key.split("/")
    sim.delete_direct("Pod", name, namespace, grace_seconds=0)
    fresh = sim.create(inference_pod(name, OTHER_NODE, labels={"app": "inference"}, namespace=namespace))
    return str(fresh["metadata"]["uid"])


def test_every_eviction_and_delete_names_the_pods_uid_and_a_delete_keeps_one_second(world: World) -> None:
    # Given a Spot node whose inference pods a PDB blocks (minAvailable 4 of 4) and 20 s left of the
    # notice, so the blocked pods are deleted at once (deadline - grace has passed)
    scenario = spot_node(world.sim, pdb_min_available=4)
    before = uids(world.sim)
    # When the warning is handled to the end
    result = handle_batch(parse_notices(spot_warning(world, seconds_left=20)), world.deps()).to_json()
    assert result["outcome"] == "handled", result["reason"]
    # Then every eviction body carries deleteOptions.preconditions.uid: the UID of the pod listed
    evictions, deletes = pod_writes(world.sim)
    assert evictions, "nothing was evicted"
    for record in evictions:
        options = record.payload["deleteOptions"]
        assert options["preconditions"]["uid"] == before[pod_of(record)], record.payload
        assert options.get("gracePeriodSeconds", 1) >= 1, record.payload
    # and every DELETE carries preconditions.uid and a grace of at least 1 s
    assert {pod_of(r) for r in deletes} >= set(scenario.inference), "the blocked pods were not deleted"
    for record in deletes:
        assert record.payload["preconditions"]["uid"] == before[pod_of(record)], record.payload
        assert record.payload["gracePeriodSeconds"] >= 1, record.payload


@dataclasses.dataclass
class SwapBeforeEvicting:
    """The real kube adapter, except that `target` is replaced by a new pod under the same name
    after the drain listed the node's pods and before its eviction arrives."""

    real: KubePort
    sim: KubeSim
    target: str
    new_uid: str = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def evict_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> EvictionOutcome:
        if f"{namespace}/{name}" == self.target and not self.new_uid:
            self.new_uid = recreate_elsewhere(self.sim, self.target)
        return self.real.evict_pod(namespace, name, uid, grace_seconds)


@dataclasses.dataclass
class SwapAfterRefusal:
    """The real kube adapter, except that when `target`'s eviction is refused (PDB), the pod is
    replaced by a new one under the same name before the deadline delete arrives."""

    real: KubePort
    sim: KubeSim
    target: str
    new_uid: str = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def evict_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> EvictionOutcome:
        outcome = self.real.evict_pod(namespace, name, uid, grace_seconds)
        if outcome.result == "blocked" and f"{namespace}/{name}" == self.target and not self.new_uid:
            self.new_uid = recreate_elsewhere(self.sim, self.target)
        return outcome


def test_a_pod_recreated_under_the_same_name_is_never_evicted_by_the_drain(world: World) -> None:
    # Given a Spot node; one inference pod is replaced by a new pod (same name, new UID, another
    # node) between the drain's pod list and its eviction
    scenario = spot_node(world.sim, pdb_min_available=None)
    target = scenario.inference[0]
    deps = world.deps()
    racer = SwapBeforeEvicting(deps.kube, world.sim, target)
    # When the warning is handled to the end
    result = handle_batch(
        parse_notices(spot_warning(world, seconds_left=60)), dataclasses.replace(deps, kube=racer)
    ).to_json()
    # Then the eviction named the old UID and the API refused it (409); the new pod runs on
    assert result["outcome"] == "handled", result["reason"]
    assert racer.new_uid
    refused = [r for r in pod_writes(world.sim)[0] if pod_of(r) == target]
    assert [r.status for r in refused] == [409]
    assert refused[0].payload["deleteOptions"]["preconditions"]["uid"] != racer.new_uid
    fresh = world.pod(target)
    assert fresh is not None
    assert fresh["metadata"]["uid"] == racer.new_uid
    assert "deletionTimestamp" not in fresh["metadata"]
    assert not [a for a in result["actions"] if a["type"] in ("evict", "delete") and a.get("pod") == target]


def test_a_pod_recreated_under_the_same_name_is_never_deleted_at_the_deadline(world: World) -> None:
    # Given a Spot node whose inference pods a PDB blocks, 20 s before the deadline (so a refused
    # eviction becomes a delete at once); one pod is replaced under its name after its refusal
    scenario = spot_node(world.sim, pdb_min_available=4)
    target = scenario.inference[0]
    deps = world.deps()
    racer = SwapAfterRefusal(deps.kube, world.sim, target)
    # When the warning is handled to the end
    result = handle_batch(
        parse_notices(spot_warning(world, seconds_left=20)), dataclasses.replace(deps, kube=racer)
    ).to_json()
    # Then the DELETE named the old UID and was refused (409); the new pod is untouched
    assert result["outcome"] == "handled", result["reason"]
    assert racer.new_uid
    deletes = [r for r in pod_writes(world.sim)[1] if pod_of(r) == target]
    assert deletes, "no deadline delete was sent"
    assert {r.status for r in deletes} == {409}
    fresh = world.pod(target)
    assert fresh is not None
    assert fresh["metadata"]["uid"] == racer.new_uid
    assert "deletionTimestamp" not in fresh["metadata"]
    # the other blocked pod was deleted as usual
    assert world.pod(scenario.inference[1]) is None


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def test_lower_priority_pods_are_asked_to_leave_first(world: World) -> None:
    # Given a Spot node with pods of three priorities: low-priority trainers (one acknowledges its
    # checkpoint after 3 s), default-priority inference pods, and a high-priority server
    scenario = spot_node(world.sim, modes=(), inference=2, pdb_min_available=None)
    world.sim.create(priority_class("batch-low", -100))
    world.sim.create(priority_class("serving-high", 100000))
    node = scenario.node
    for i, checkpoint in enumerate(("annotate", None)):
        trainer = training_pod(f"low-{i}", node, gpus=1, checkpoint=checkpoint)
        trainer["spec"]["priorityClassName"] = "batch-low"
        world.sim.create(trainer)
    server = inference_pod("high-0", node, labels={"app": "critical"})
    server["spec"]["priorityClassName"] = "serving-high"
    world.sim.create(server)
    world.workloads.delay = 3.0
    priorities = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["priority"] for p in world.sim.list("Pod")
    }
    assert priorities["ml/low-0"] == -100
    assert priorities["serving/high-0"] == 100000
    # When the warning is handled to the end
    result = handle_batch(parse_notices(spot_warning(world, seconds_left=120)), world.deps()).to_json()
    assert result["outcome"] == "handled", result["reason"]
    # Then each pod's first eviction is no earlier than that of any lower-priority pod
    first: dict[str, RequestRecord] = {}
    for record in pod_writes(world.sim)[0]:
        first.setdefault(pod_of(record), record)
    assert set(first) == {"ml/low-0", "ml/low-1", "serving/high-0", *scenario.inference}
    for pod, record in first.items():
        for other, earlier in first.items():
            if priorities[other] < priorities[pod]:
                assert earlier.started <= record.started, f"{pod} asked before lower-priority {other}"
    # and the lower-priority trainer's checkpoint held the others back until it acknowledged
    assert first["ml/low-0"].started < first[scenario.inference[0]].started
