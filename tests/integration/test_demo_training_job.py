"""The demo's training-job scene on its own: one rank's Spot warning, one eviction, the three other
ranks left running, the replacement launched in the gang's zone."""

from __future__ import annotations

from sim.actors.karpenter import Karpenter
from sim.actors.workloads import Workloads
from sim.apiserver.core import KubeSim
from sim.scenes.base import simulated_aws
from sim.scenes.training_job import DOOMED, JOB, RANKS, ZONE, training_job_scene


def test_the_training_job_scene_evicts_one_rank_and_replaces_it_in_the_gangs_zone() -> None:
    # Given the demo's simulator with the trainers' side of the handshake and Karpenter running
    with simulated_aws(), KubeSim(clock_speed=20.0) as sim:
        Workloads(sim, delay=1.0).install()
        karpenter = Karpenter(sim, interruption_queue=False, launch_seconds=0).start()
        try:
            # When the scene runs
            summary = training_job_scene(sim)
            # Then the doomed rank alone was evicted, after its checkpoint, and the others still run
            assert summary.outcome == "handled"
            # and the summary row counts what the scene says: ranks asked 4 of 4, all 4 checkpointed
            assert (summary.evicted, summary.asked, summary.checkpointed) == (1, len(RANKS), len(RANKS))
            # And every rank was asked: the three left running carry the request too
            survivors = [p for p in sim.list("Pod", namespace="ml") if JOB in p["metadata"]["name"]]
            assert all("gpuwarden.io/checkpoint-requested" in p["metadata"]["annotations"] for p in survivors)
            ranks = {
                p["metadata"]["name"].split("-")[2]
                for p in sim.list("Pod", namespace="ml")
                if JOB in p["metadata"]["name"]
            }
            assert ranks == {str(r) for r in range(len(RANKS)) if r != DOOMED}
            # And the replacement NodeClaim was launched in the gang's zone
            [claim] = [c for c in sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden-")]
            assert claim["metadata"]["labels"]["topology.kubernetes.io/zone"] == ZONE
        finally:
            karpenter.stop()
