"""The controllers' parts the real plane showed the simulator lacked (docs/realplane.md, finding 12):
the Job controller's job-tracking finalizer on a deleted pod, the node lifecycle controller's
unschedulable taint, and what Karpenter's launch and registration write on a claim and its node."""

from __future__ import annotations

from sim import KubeSim
from sim.actors.controllers import JOB_TRACKING, JobTracking, UnschedulableTaint
from sim.actors.karpenter import Karpenter
from sim.builders import gpu_node, pod


def test_a_job_pods_tracking_finalizer_goes_when_it_is_deleted_and_the_pod_after_its_grace(sim: KubeSim) -> None:
    sim.create(gpu_node("n1", "i-01"))
    trainer = pod("trainer", "n1", "ml")
    trainer["metadata"]["finalizers"] = [JOB_TRACKING]
    sim.create(trainer)
    JobTracking(sim)
    sim.delete_direct("Pod", "trainer", "ml")
    found = sim.get("Pod", "trainer", "ml")
    assert found is not None
    assert not found["metadata"].get("finalizers")  # taken off at once: the pod is counted
    sim.clock.advance(31)
    sim.store.reap()
    assert sim.get("Pod", "trainer", "ml") is None  # gone after its grace, as a kubelet ends it


def test_a_cordoned_node_carries_the_unschedulable_taint_until_it_is_uncordoned(sim: KubeSim) -> None:
    sim.create(gpu_node("n1", "i-01"))
    UnschedulableTaint(sim)
    sim.patch_direct("Node", "n1", {"spec": {"unschedulable": True}})
    keys = [t["key"] for t in sim.get("Node", "n1")["spec"].get("taints") or []]  # type: ignore[index]
    assert "node.kubernetes.io/unschedulable" in keys
    sim.patch_direct("Node", "n1", {"spec": {"unschedulable": False}})
    keys = [t["key"] for t in sim.get("Node", "n1")["spec"].get("taints") or []]  # type: ignore[index]
    assert "node.kubernetes.io/unschedulable" not in keys


def test_launch_labels_the_claim_and_registration_copies_its_annotations_to_the_node(sim: KubeSim) -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "gpu"}, "annotations": {"a/b": "c"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]},
                {"key": "team", "operator": "In", "values": ["ml"]},
            ],
        },
    }
    sim.create(claim)
    Karpenter(sim, interruption_queue=False, launch_seconds=0).step()
    launched = sim.get("NodeClaim", "c1")
    assert launched is not None
    labels = launched["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert labels["team"] == "ml"  # a single-valued In requirement
    assert (labels["kubernetes.io/arch"], labels["kubernetes.io/os"]) == ("amd64", "linux")
    assert {"topology.kubernetes.io/zone", "karpenter.sh/capacity-type"} <= set(labels)
    node = sim.get("Node", launched["status"]["nodeName"])
    assert node is not None
    assert node["metadata"]["annotations"]["a/b"] == "c"
