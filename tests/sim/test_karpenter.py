"""The simulated Karpenter behaves as its source says: interruption, termination, eviction queue, provisioner."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sim import KubeSim
from sim import builders as b
from sim.actors.karpenter import (
    DO_NOT_DISRUPT,
    FINALIZER,
    TERMINATION_TIMESTAMP,
    Karpenter,
    MessageKind,
    go_duration,
    parse_message,
)
from sim.clock import parse_rfc3339

EVENTS = Path(__file__).resolve().parents[2] / "events"
NODE, INSTANCE = "ip-10-0-1-23.us-west-2.compute.internal", "i-0abc1234def567890"


def cluster(sim: KubeSim, tgp: str | None = None, pdb: bool = False) -> dict[str, Any]:
    """A Karpenter GPU node with a trainer, an inference pod, a DaemonSet pod and a mirror pod."""
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    claim = b.nodeclaim_for(node)
    if tgp:
        claim["spec"]["terminationGracePeriod"] = tgp
    claim = sim.create(claim)
    sim.create(b.training_pod("train-0-worker", node, gpus=4, grace=10))
    sim.create(b.inference_pod("inference-0", node, grace=5))
    sim.create(b.daemonset_pod(node))
    sim.create(b.mirror_pod("kube-proxy", node))
    if pdb:
        sim.create(b.pdb("inference", "serving", {"app": "inference"}, min_available=1))
    return claim


def run(karpenter: Karpenter, sim: KubeSim, seconds: float, tick: float = 0.5) -> None:
    """Step the controllers while the (frozen) sim clock moves ``seconds`` forward."""
    for _ in range(int(seconds / tick)):
        karpenter.settle()
        sim.clock.advance(tick)
        sim.store.reap()
    karpenter.settle()


def types(karpenter: Karpenter) -> list[str]:
    return [a.type for a in karpenter.actions]


def test_registration_puts_the_termination_finalizer_on_the_node(sim: KubeSim) -> None:
    cluster(sim)
    Karpenter(sim).step()
    assert FINALIZER in (sim.get("Node", NODE) or {})["metadata"]["finalizers"]


def test_spot_message_deletes_the_nodeclaim_then_the_node_is_tainted_and_drained(sim: KubeSim) -> None:
    # Given a Karpenter node and Karpenter with its interruption queue
    claim = cluster(sim)
    karpenter = Karpenter(sim)
    karpenter.step()
    # When the Spot warning reaches Karpenter
    event = json.loads((EVENTS / "spot-interruption.json").read_text())
    event["detail"]["instance-id"] = INSTANCE
    did = karpenter.deliver_event(event)
    # Then the NodeClaim is deleted at once (held by its finalizer)
    assert [a.type for a in did] == ["nodeclaim-deleted"]
    assert sim.get("NodeClaim", claim["metadata"]["name"])["metadata"]["deletionTimestamp"]  # type: ignore[index]
    karpenter.settle()
    # the node is deleted, tainted karpenter.sh/disrupted, and every drainable pod evicted
    node = sim.get("Node", NODE)
    assert node is not None
    assert node["metadata"]["deletionTimestamp"]
    assert {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"} in node["spec"]["taints"]
    evicted = {a.target for a in karpenter.actions if a.type == "evicted"}
    assert evicted == {"ml/train-0-worker", "serving/inference-0"}
    # the DaemonSet pod (tolerates everything) and the mirror pod are left alone
    assert all("kube-system" not in a.target for a in karpenter.actions if a.type in ("evicted", "force-deleted"))
    # and the offering is remembered as unavailable
    assert ("p4d.24xlarge", "us-west-2a", "spot") in karpenter.unavailable


def test_the_node_and_nodeclaim_go_once_drained_and_the_instance_terminated(sim: KubeSim) -> None:
    claim = cluster(sim)
    karpenter = Karpenter(sim, launch_seconds=30)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    run(karpenter, sim, 20)
    assert sim.get("Node", NODE) is None
    assert sim.get("NodeClaim", claim["metadata"]["name"]) is None
    order = [t for t in types(karpenter) if t in ("drained", "instance-terminating", "node-finalized")]
    assert order[:3] == ["drained", "instance-terminating", "node-finalized"]
    assert "nodeclaim-finalized" in types(karpenter)


def test_do_not_disrupt_pods_stall_the_drain_without_a_termination_grace_period(sim: KubeSim) -> None:
    cluster(sim)
    sim.patch_direct("Pod", "train-0-worker", {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}}, "ml")
    karpenter = Karpenter(sim)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, "spot_interrupted")
    run(karpenter, sim, 120)
    # the trainer is never evicted, the node waits for it
    trainer = sim.get("Pod", "train-0-worker", "ml")
    assert trainer is not None
    assert not trainer["metadata"].get("deletionTimestamp")
    assert sim.get("Node", NODE) is not None
    assert "node-finalized" not in types(karpenter)
    # once someone else evicts it, Karpenter finishes the node
    sim.delete_direct("Pod", "train-0-worker", "ml")
    run(karpenter, sim, 30)
    assert sim.get("Node", NODE) is None


def test_termination_grace_period_force_deletes_do_not_disrupt_pods_with_the_grace_left(sim: KubeSim) -> None:
    # Given a NodeClaim with terminationGracePeriod 60s and a do-not-disrupt trainer (grace 10 s)
    claim = cluster(sim, tgp="60s")
    sim.patch_direct("Pod", "train-0-worker", {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}}, "ml")
    karpenter = Karpenter(sim)
    karpenter.step()
    deleted_at = sim.clock.now()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SCHEDULED_CHANGE)
    karpenter.settle()
    annotations = sim.get("NodeClaim", claim["metadata"]["name"])["metadata"]["annotations"]  # type: ignore[index]
    assert TERMINATION_TIMESTAMP in annotations
    # When time passes up to (termination time - the pod's grace)
    run(karpenter, sim, 49)
    assert "force-deleted" not in types(karpenter)
    run(karpenter, sim, 12)  # the queue backs off up to 10 s between looks at a do-not-disrupt pod
    # Then it is deleted, not evicted, with the grace that is left (>= 1 s)
    forced = [a for a in karpenter.actions if a.type == "force-deleted"]
    assert [a.target for a in forced] == ["ml/train-0-worker"]
    assert (forced[0].at - deleted_at).total_seconds() > 50


def test_pdb_429s_are_retried_with_backoff_never_counted_as_evicted(sim: KubeSim) -> None:
    cluster(sim, pdb=True)
    karpenter = Karpenter(sim, provision=False)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    run(karpenter, sim, 10)
    blocked = [a for a in karpenter.actions if a.type == "eviction-blocked"]
    assert blocked
    assert all(a.target == "serving/inference-0" for a in blocked)
    assert "serving/inference-0" not in {a.target for a in karpenter.actions if a.type == "evicted"}
    gaps = [(y.at - x.at).total_seconds() for x, y in itertools.pairwise(blocked)]
    assert gaps == sorted(gaps)  # exponential backoff
    assert sim.get("Pod", "inference-0", "serving") is not None


def test_queue_off_ignores_interruption_messages(sim: KubeSim) -> None:
    claim = cluster(sim)
    karpenter = Karpenter(sim, interruption_queue=False)
    karpenter.step()
    assert karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED) == []
    karpenter.settle()
    assert not sim.get("NodeClaim", claim["metadata"]["name"])["metadata"].get("deletionTimestamp")  # type: ignore[index]


def test_provisioner_replaces_the_displaced_gpu_pods_once_and_launches_a_node(sim: KubeSim) -> None:
    cluster(sim)  # no do-not-disrupt: a pod that stays gets nothing (below)
    karpenter = Karpenter(sim, launch_seconds=10)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    run(karpenter, sim, 15)
    created = karpenter.created_nodeclaims()
    assert len(created) == 1
    launched = sim.get("NodeClaim", created[0])
    assert launched is not None
    assert launched["status"]["nodeName"]
    # steered away from the interrupted offering
    assert launched["metadata"]["labels"]["topology.kubernetes.io/zone"] != "us-west-2a"
    new_node = sim.get("Node", launched["status"]["nodeName"])
    assert new_node is not None
    assert FINALIZER in new_node["metadata"]["finalizers"]


def test_a_nodeclaim_someone_else_created_is_counted_as_capacity(sim: KubeSim) -> None:
    # Given another controller already created a replacement NodeClaim for the node's GPUs
    cluster(sim)
    other = b.nodeclaim_for(sim.get("Node", NODE) or {}, name="gpu-training-gpuwarden")
    other["status"] = {}
    sim.create(other)
    karpenter = Karpenter(sim, launch_seconds=1000)
    karpenter.step()
    # When Karpenter handles the interruption
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    run(karpenter, sim, 5)
    # Then it launches nothing of its own: the pods fit on the in-flight NodeClaim
    assert karpenter.created_nodeclaims() == []


def test_state_change_and_health_events_are_parsed_as_karpenter_does() -> None:
    stopping = {"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}
    assert parse_message({**stopping, "detail": {"instance-id": "i-1", "state": "stopping"}}) == (
        MessageKind.INSTANCE_STOPPED,
        ["i-1"],
    )
    assert parse_message({**stopping, "detail": {"instance-id": "i-1", "state": "running"}}) is None
    health = {"source": "aws.health", "detail-type": "AWS Health Event"}
    detail = {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": [{"entityValue": "i-2"}]}
    assert parse_message({**health, "detail": detail}) == (MessageKind.SCHEDULED_CHANGE, ["i-2"])
    assert parse_message({**health, "detail": {**detail, "service": "RDS"}}) is None
    assert go_duration("1h30m").total_seconds() == 5400
    assert go_duration("90s").total_seconds() == 90


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_sees_what_karpenter_did() -> None:
    with KubeSim(clock_speed=0) as sim:
        cluster(sim)
        karpenter = Karpenter(sim)
        karpenter.step()
        karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
        karpenter.settle()
        cache = Path(sim.kubeconfig_path).parent / "kubectl-cache"
        base = ["kubectl", "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(cache)]
        node = json.loads(
            subprocess.run(
                [*base, "get", "node", NODE, "-o", "json"], capture_output=True, text=True, check=True
            ).stdout
        )
        assert node["metadata"]["deletionTimestamp"]
        assert FINALIZER in node["metadata"]["finalizers"]
        assert any(t["key"] == "karpenter.sh/disrupted" for t in node["spec"]["taints"])
        claims = subprocess.run(
            [*base, "get", "nodeclaims.karpenter.sh", "-o", "json"], capture_output=True, text=True, check=True
        )
        assert any(c["metadata"].get("deletionTimestamp") for c in json.loads(claims.stdout)["items"])
        pods = subprocess.run([*base, "get", "pods", "-A", "-o", "json"], capture_output=True, text=True, check=True)
        terminating = {
            p["metadata"]["name"] for p in json.loads(pods.stdout)["items"] if p["metadata"].get("deletionTimestamp")
        }
        assert terminating == {"train-0-worker", "inference-0"}


def test_started_karpenter_reacts_to_writes_on_its_own_thread() -> None:
    with KubeSim(clock_speed=50) as sim:
        claim = cluster(sim)
        with Karpenter(sim, launch_seconds=5) as karpenter:
            karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
            assert sim.wait_until(lambda: sim.get("Node", NODE) is None, timeout=20)
            assert sim.wait_until(lambda: sim.get("NodeClaim", claim["metadata"]["name"]) is None, timeout=5)
            assert sim.wait_until(lambda: len(karpenter.created_nodeclaims()) == 1, timeout=5)
        requests = [r for r in sim.requests if r.user_agent.startswith("karpenter/")]
        assert any(r.method == "POST" and r.path.endswith("/eviction") for r in requests)


def test_a_pending_pod_bound_before_the_batch_closes_gets_no_nodeclaim(sim: KubeSim) -> None:
    # Given a pending GPU pod (no node) the provisioner has put in its batch, and a node with room
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    sim.create(b.nodeclaim_for(node))
    pending = sim.create(b.training_pod("notebook-0", "", gpus=8))  # no node: Pending
    karpenter = Karpenter(sim, launch_seconds=1000, batch_idle_seconds=5)
    karpenter.step()
    assert karpenter.batching
    # When the pod is bound to that node (all its GPUs) before the batch window closes
    status = b.running_status(node, "notebook-0", pending["spec"]["containers"])
    sim.patch_direct("Pod", "notebook-0", {"spec": {"nodeName": NODE}, "status": status}, "ml")
    run(karpenter, sim, 10)
    # Then the provisioner launches nothing: it schedules only pods that still need a place
    assert karpenter.created_nodeclaims() == []
    assert not karpenter.batching


def test_a_driver_that_steps_only_at_the_stand_ins_own_times_finishes_a_drain(sim: KubeSim) -> None:
    """`simulate` steps Karpenter on writes and at `due_times` + `drain_times`, not every second:
    those times must hold every moment a drain changes with time alone."""
    # Given a NodeClaim with terminationGracePeriod 60s, a do-not-disrupt trainer (grace 10 s), interrupted
    claim = cluster(sim, tgp="60s")
    sim.patch_direct("Pod", "train-0-worker", {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}}, "ml")
    karpenter = Karpenter(sim)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SCHEDULED_CHANGE)
    karpenter.settle()
    annotations = sim.get("NodeClaim", claim["metadata"]["name"])["metadata"]["annotations"]  # type: ignore[index]
    deadline = parse_rfc3339(annotations[TERMINATION_TIMESTAMP])
    # Then the drain names the moment the trainer's own grace would outlast the termination time
    assert deadline - timedelta(seconds=10, milliseconds=-1) in karpenter.drain_times()
    # When a driver steps only at the stand-in's own times and the store's deletion deadlines
    steps = 0
    while sim.get("Node", NODE) is not None and steps < 100:
        now = sim.clock.now()
        reap = sim.store.next_deadline()
        due = [t for t in [*karpenter.due_times(), *karpenter.drain_times(), *([reap] if reap else [])] if t > now]
        assert due, "the drain waits on nothing the driver would wake for"
        sim.clock.advance((min(due) - now).total_seconds())
        sim.store.reap()
        karpenter.settle()
        steps += 1
    # Then the node is finished, the trainer deleted (not evicted) after deadline - its grace
    assert sim.get("Node", NODE) is None
    forced = [a for a in karpenter.actions if a.type == "force-deleted"]
    assert [a.target for a in forced] == ["ml/train-0-worker"]
    assert forced[0].at > deadline - timedelta(seconds=10)
    assert steps < 40  # a one-second poll takes 60+


# ---------------------------------------------------------------- what the provisioner schedules
# Real Karpenter v1.14.1 launches nothing for a deleting node's pod that will not leave
# (``Provisioner.Schedule`` takes ``nodes.Deleting().CurrentlyReschedulablePods``:
# ``pkg/utils/pdb/pdb.go`` ``IsCurrentlyReschedulable``): a do-not-disrupt pod, a pod a fully blocking
# PDB holds. Before, the stand-in launched a node for a do-not-disrupt pod on an expired node,
# emptiness consolidation removed it, and it launched again, all week (docs/simulate.md).
def trainer_alone(sim: KubeSim, annotations: dict[str, str] | None = None) -> None:
    """A Karpenter GPU node whose only GPU pod is a Job's four-GPU trainer."""
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    sim.create(b.nodeclaim_for(node))
    pod = b.training_pod("train-0-worker", node, gpus=4, grace=10, labels={"app": "train"})
    pod["metadata"].setdefault("annotations", {}).update(annotations or {})
    sim.create(pod)


def launched_after_deletion(sim: KubeSim) -> list[str]:
    karpenter = Karpenter(sim, launch_seconds=10)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SCHEDULED_CHANGE)  # cordon and drain
    run(karpenter, sim, 60)
    return karpenter.created_nodeclaims()


def test_a_do_not_disrupt_pod_on_a_deleting_node_gets_no_new_node(sim: KubeSim) -> None:
    # Given the node's trainer carries karpenter.sh/do-not-disrupt: "true"
    trainer_alone(sim, {DO_NOT_DISRUPT: "true"})
    # When its NodeClaim is deleted and a minute passes (the batch window is 1 s)
    created = launched_after_deletion(sim)
    # Then the pod stays where it is and nothing is launched for it
    assert created == []
    trainer = sim.get("Pod", "train-0-worker", "ml")
    assert trainer is not None
    assert not trainer["metadata"].get("deletionTimestamp")


def test_a_held_pod_that_leaves_gets_its_node_as_its_controller_brings_it_back_pending(sim: KubeSim) -> None:
    # Given a do-not-disrupt trainer held on its deleting node, nothing launched for it
    trainer_alone(sim, {DO_NOT_DISRUPT: "true"})
    karpenter = Karpenter(sim, launch_seconds=10)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SCHEDULED_CHANGE)
    run(karpenter, sim, 30)
    assert karpenter.created_nodeclaims() == []
    # When someone else deletes it (gpuwarden, after its checkpoint)
    sim.delete_direct("Pod", "train-0-worker", "ml")
    run(karpenter, sim, 30)
    # Then the provisioner launches one node for it, as for the Job's new pending pod
    assert len(karpenter.created_nodeclaims()) == 1


def test_the_same_pod_without_the_annotation_gets_its_node(sim: KubeSim) -> None:
    trainer_alone(sim)
    assert len(launched_after_deletion(sim)) == 1


def test_an_outlived_do_not_disrupt_duration_no_longer_holds_the_pod(sim: KubeSim) -> None:
    # Given do-not-disrupt "1m" on a trainer that started (b.running_status) before the clock's now - 1m
    trainer_alone(sim, {DO_NOT_DISRUPT: "1m"})
    sim.clock.advance(120)
    # Then it is reschedulable again: a node is launched for it
    assert len(launched_after_deletion(sim)) == 1


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "blocks"),
    [(None, 0, True), (None, "0%", True), ("100%", None, True), (1, None, False), (None, 1, False)],
)
def test_a_fully_blocking_pdb_holds_the_pod_and_gets_it_no_node(
    sim: KubeSim, min_available: int | str | None, max_unavailable: int | str | None, blocks: bool
) -> None:
    # Given a PDB over the trainer (`newPdb`'s isFullyBlocking: maxUnavailable 0 or "0%", minAvailable "100%")
    trainer_alone(sim)
    sim.create(b.pdb("train", "ml", {"app": "train"}, min_available=min_available, max_unavailable=max_unavailable))
    # Then only a PDB that is not fully blocking lets the provisioner launch for the pod
    assert (launched_after_deletion(sim) == []) is blocks


def test_a_pod_under_two_pdbs_is_fully_blocked(sim: KubeSim) -> None:
    trainer_alone(sim)
    sim.create(b.pdb("train-a", "ml", {"app": "train"}, max_unavailable=1))
    sim.create(b.pdb("train-b", "ml", {"app": "train"}, max_unavailable=1))
    assert launched_after_deletion(sim) == []
