"""The simulated Karpenter's provisioner never launches for a pod that is gone once its controller
has brought it back (docs/simulate.md, "Launches for pods that are gone").

Karpenter schedules only the pods it lists when its batch closes: the pending ones and the
reschedulable pods of deleting nodes (v1.14.1 ``pkg/controllers/provisioning/provisioner.go``,
``Schedule``). A held do-not-disrupt trainer that gpuwarden evicts after its checkpoint is gone;
its Job's new pod is what needs a home. Bound at once on a free node, it needs none. The stand-in
counted the gone pod as well, and the week's Spot-interruption restarts launched a node nobody
used (seed 7: a p4d in gpu-distributed-spot idle for the rest of the week in gpuwarden's arm).
"""

from __future__ import annotations

from sim import KubeSim
from sim import builders as b
from sim.actors.karpenter import DO_NOT_DISRUPT, Karpenter, MessageKind

NODE, INSTANCE = "ip-10-0-1-23.us-west-2.compute.internal", "i-0abc1234def567890"
FREE, FREE_INSTANCE = "ip-10-0-1-24.us-west-2.compute.internal", "i-0abc1234def567891"


def _run(karpenter: Karpenter, sim: KubeSim, seconds: float) -> None:
    for _ in range(int(seconds / 0.5)):
        karpenter.settle()
        sim.clock.advance(0.5)
        sim.store.reap()
    karpenter.settle()


def _held_trainer_leaves(sim: KubeSim, free_node: bool) -> Karpenter:
    """An 8-GPU Job trainer with do-not-disrupt on a node Karpenter deletes (a Spot interruption),
    held there; then evicted (gpuwarden, after the checkpoint) and its Job's next pod created."""
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    sim.create(b.nodeclaim_for(node))
    if free_node:
        other = sim.create(b.gpu_node(FREE, FREE_INSTANCE, ip="10.0.1.24"))
        sim.create(b.nodeclaim_for(other))
    trainer = b.training_pod("train-0", node, gpus=8, grace=10)
    trainer["metadata"]["annotations"][DO_NOT_DISRUPT] = "true"
    sim.create(trainer)
    karpenter = Karpenter(sim, launch_seconds=10)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    _run(karpenter, sim, 5)
    assert karpenter.created_nodeclaims() == []  # held: nothing for it yet
    sim.delete_direct("Pod", "train-0", "ml", grace_seconds=0)
    successor = b.training_pod("train-1", FREE if free_node else "", gpus=8, grace=10)
    successor["metadata"]["ownerReferences"] = trainer["metadata"]["ownerReferences"]
    if not free_node:
        successor["status"] = {"phase": "Pending"}
    sim.create(successor)
    _run(karpenter, sim, 30)
    return karpenter


def test_a_successor_bound_on_a_free_node_gets_no_new_node(sim: KubeSim) -> None:
    # Given a free node in the pool, When the held trainer leaves and its successor binds there
    karpenter = _held_trainer_leaves(sim, free_node=True)
    # Then nothing is launched (it launched one for the gone pod before)
    assert karpenter.created_nodeclaims() == []


def test_a_pending_successor_gets_one_node_not_one_for_it_and_one_for_the_gone_pod(sim: KubeSim) -> None:
    # Given no room anywhere, When the held trainer leaves and its successor is pending
    karpenter = _held_trainer_leaves(sim, free_node=False)
    # Then one node is launched, for the successor (two before: 8 GPUs each, one node each)
    assert len(karpenter.created_nodeclaims()) == 1
