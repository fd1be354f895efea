"""gpuwarden's real dependencies pointed at a simulator: the demo's, the tests' and the benchmarks'.

The same adapters and Kubernetes client as deployed, over HTTP to the simulator; the services'
clocks are the simulator's, and their sleeps shrink with its speed (or, on a `SteppedClock`, are
what moves it), so a sped-up cluster and gpuwarden's deadlines stay on one time line.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sim.actors.capacity_reservations import CapacityReservations
from sim.apiserver.core import KubeSim
from sim.stepped import SteppedClock

if TYPE_CHECKING:
    from gpuwarden.domain.policy import Policy
    from gpuwarden.services.engine.context import Deps


def sim_deps(
    sim: KubeSim,
    *,
    caller: str,
    policy: Policy | None = None,
    ledger: Any = None,
    dry_run: bool = False,
    reservations: CapacityReservations | None = None,
    throttle: bool = True,
) -> Deps:
    """``reservations`` answers EC2 DescribeCapacityReservations, which moto lacks (an empty account
    when not given); every other AWS call goes wherever the environment points (moto).
    ``throttle=False``: no client-side QPS limit, for a run on a discrete-event clock (`simulate`),
    where the limiter's real seconds mean nothing: it would only slow the run, never move a figure."""
    from gpuwarden.adapters.kube import KubeClient
    from gpuwarden.adapters.ledger import MemoryLedger
    from gpuwarden.config import Settings
    from gpuwarden.domain.policy import Policy
    from gpuwarden.wiring import build_deps

    deps = build_deps(
        Settings(region="us-west-2", cluster="ml-prod").model_copy(update={} if throttle else {"kube_qps": 0.0}),
        dry_run=dry_run,
        caller=caller,
        api_client=sim.api_client(),
        ledger=ledger if ledger is not None else MemoryLedger(),
        policy=policy or Policy(cluster="ml-prod"),
    )
    cloud = deps.cloud
    if hasattr(cloud, "ec2"):
        (reservations or CapacityReservations()).attach(cloud.ec2)
    speed = sim.clock.speed or 1.0
    deps.clock = sim.clock.now
    deps.window_clock = sim.clock.now
    clock = sim.clock
    deps.sleep = lambda seconds: time.sleep(seconds / speed)
    if isinstance(clock, SteppedClock):  # it moves only when this sleeps (sim/stepped.py)
        deps.sleep = clock.sleep
        if isinstance(deps.kube, KubeClient):
            # the client's retry backoff sleeps wall seconds, which this clock does not count: nothing
            # of the simulator moves meanwhile, so the wait changes nothing a scene sees, and costs
            # the suite about 1.5 s per request that meets an outage
            deps.kube._sleep = lambda _seconds: None
    return deps
