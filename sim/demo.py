"""`gpuwarden demo`: sample events through the real handlers on a simulated cluster and AWS.

Nothing here is faked on gpuwarden's side: the same services, adapters and Kubernetes client
as deployed, talking HTTP to the simulator; AWS is moto. The simulated workloads acknowledge
checkpoints the way a training job would, and a simulated Karpenter turns NodeClaims into nodes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from sim.actors.controllers import ReplicaSetReplacer
from sim.actors.karpenter import Karpenter
from sim.actors.workloads import Workloads
from sim.apiserver.core import KubeSim
from sim.scenes.base import SceneSummary, build_cluster, simulated_aws
from sim.scenes.capacity_block import capacity_block_scene
from sim.scenes.gpu_idle import gpu_idle_scene
from sim.scenes.karpenter import karpenter_scene
from sim.scenes.runbook import runbook_scene
from sim.scenes.spot import spot_scene
from sim.scenes.training_job import training_job_scene
from sim.scenes.windows import windows_scene

#: The tour, in order. A scene takes the running simulator (with the cluster of
#: `build_cluster`, Workloads, Karpenter and the ReplicaSet controller installed) and
#: returns its summary row. Add a scene: a module under sim/scenes/ with
#: `def my_scene(sim) -> SceneSummary` (sharing `sim.scenes.base`), appended here.
SCENES: list[Callable[[KubeSim], SceneSummary]] = [
    spot_scene,
    training_job_scene,
    gpu_idle_scene,
    runbook_scene,
    windows_scene,
    karpenter_scene,
    capacity_block_scene,
]


def run_demo(speed: float = 10.0) -> int:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.pop("KUBECONFIG", None)
    from gpuwarden.observability import logger

    logger.setLevel("WARNING")
    began = time.monotonic()
    print("gpuwarden demo: a simulated EKS GPU cluster (Kubernetes API simulator) and AWS (moto)")
    print(f"  cluster time runs {speed:g}x real time: grace periods and checkpoint writes are simulated")
    summaries: list[SceneSummary] = []
    with simulated_aws(), KubeSim(clock_speed=speed) as sim:
        build_cluster(sim)
        Workloads(sim, delay=6.0).install()
        karpenter = Karpenter(sim, interruption_queue=False).start()  # the queue-on scene turns it on
        ReplicaSetReplacer(sim)
        for scene in SCENES:
            summaries.append(scene(sim))
        karpenter.stop()
    print("\nSummary")
    print(f"  {'scene':<20} {'outcome':<9} {'nodes':>5} {'asked':>5} {'ckpt':>5} {'evicted':>7} {'left of notice':>15}")
    for s in summaries:
        left = "-" if s.seconds_left is None else f"{s.seconds_left:.1f} s"
        row = f"{s.nodes:>5} {s.asked:>5} {s.checkpointed:>5} {s.evicted:>7} {left:>15}"
        print(f"  {s.scene:<20} {s.outcome:<9} {row}")
    print(f"\ndemo finished in {time.monotonic() - began:.1f} s real time")
    return 0 if all(s.outcome == "handled" for s in summaries) else 1
