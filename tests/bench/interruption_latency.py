"""How fast the interruption handler acts: notice → node cordoned, notice → last checkpoint signal sent.

    .venv/bin/python -m tests.bench.interruption_latency [--runs 20] [--signal-pods 8]

Each run: a fresh simulator (speed 1, real clock) with the samples' Spot node running
``--signal-pods`` SIGUSR1 trainers, an exec trainer, an annotate trainer, inference pods behind a
PDB, a DaemonSet and a mirror pod; the Spot warning goes through `handle_batch` as deployed
(the drain handed to a no-op workflow starter, so the urgent first invocation is what is timed).
The clock starts once the event is parsed into a notice. Figures come from the actions' timestamps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from dateutil.parser import isoparse


def one_run(signal_pods: int) -> tuple[float, float]:
    from gpuwarden.adapters.ledger import MemoryLedger
    from gpuwarden.config import Settings
    from gpuwarden.domain.policy import Policy
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from gpuwarden.wiring import build_deps
    from sim import KubeSim
    from sim.actors.workloads import Workloads
    from sim.clock import rfc3339
    from tests.integration.conftest import load_event
    from tests.integration.scenarios import spot_node

    with KubeSim(clock_speed=1.0) as sim:
        Workloads(sim, delay=0.5).install()
        modes = ("signal:SIGUSR1",) * signal_pods + ("exec:/bin/checkpoint --now", "annotate")
        spot_node(sim, modes=modes, inference=2, grace=2)
        started: list[dict[str, Any]] = []
        deps = build_deps(
            Settings(region="us-west-2", cluster="ml-prod"),
            caller="bench",
            api_client=sim.api_client(),
            ledger=MemoryLedger(),
            policy=Policy(cluster="ml-prod"),
            start_drain=started.append,
        )
        batch = parse_notices(load_event("spot-interruption.json", time=rfc3339(sim.clock.now())))
        notice_at = datetime.now(UTC)
        result = handle_batch(batch, deps, drain_locally=False)
    actions = result.actions
    assert result.outcome == "handled", result.reason
    assert started, "the drain was not handed to the workflow"
    cordoned = next(isoparse(a["at"]) for a in actions if a["type"] == "cordon")
    signals = [isoparse(a["at"]) for a in actions if a["type"] == "signal"]
    assert len(signals) == signal_pods, signals
    return (cordoned - notice_at).total_seconds(), (max(signals) - notice_at).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--signal-pods", type=int, default=8)
    args = parser.parse_args()
    for key, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_REGION": "us-west-2"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    one_run(args.signal_pods)  # warm-up: imports, first connections
    cordon: list[float] = []
    signal: list[float] = []
    t0 = time.monotonic()
    for _ in range(args.runs):
        c, s = one_run(args.signal_pods)
        cordon.append(c * 1000)
        signal.append(s * 1000)
    print(f"{args.runs} runs, {args.signal_pods} SIGUSR1 pods, {time.monotonic() - t0:.1f} s in all")
    for name, values in (("notice -> cordoned", cordon), ("notice -> last signal sent", signal)):
        ordered = sorted(values)
        p90 = ordered[int(0.9 * (len(ordered) - 1))]
        print(f"{name:28s} median {statistics.median(values):7.1f} ms  min {ordered[0]:7.1f}  p90 {p90:7.1f}")


if __name__ == "__main__":
    main()
