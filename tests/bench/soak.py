"""Soak: `gpuwarden simulate`'s runner for 30 days on ~200 nodes (the built-in scenario scaled up),
gpuwarden beside Karpenter only. Every gpuwarden invocation is reconciled: it ended with a result
or a recorded failure, and each handled notice is in gpuwarden's ledger; no invariant of the run's
ledger is broken (each pod's life stops once, nodes go down after they came up, idle never exceeds paid).
Figures: invocations per real second through the pipeline, and peak RSS of the process.
"""

from __future__ import annotations

import itertools
import os
import resource
import time
from typing import Any

from sim.outcome.events import generate
from sim.outcome.runner import Arm, run_arm
from sim.outcome.scenario import Scenario, load_scenario
from tests.bench.common import Figure, figure

#: `GPUWARDEN_SOAK_DAYS` (default 1): `make bench` runs one day; the 30-day soak takes ~40 real
#: minutes on this 2-core machine (0.78 simulated days per real minute at 186 nodes with the
#: built-in week's expiries, `make bench` of 2026-11-28; 2.47 before them)
DAYS = float(os.environ.get("GPUWARDEN_SOAK_DAYS", "1"))
SCALE = 3  # the built-in week's 62 nodes x 3 = 186 nodes
SMALLEST: dict[str, Any] = {"days": 0.05, "scale": 1}


class SoakBroken(AssertionError):
    pass


def scaled(factor: int = SCALE) -> Scenario:
    doc = load_scenario().model_dump(mode="json")
    for pool in doc["pools"]:
        pool["nodes"] *= factor
    for group in ("training", "notebooks"):
        for spec in doc[group]:
            spec["jobs" if group == "training" else "count"] *= factor
    for spec in doc["inference"]:
        spec["replicas"] *= factor
        spec["min_available"] *= factor
    doc["name"] = f"builtin-x{factor}"
    return Scenario.model_validate(doc)


def _reconcile(result: Any, gpuwarden_ledger: Any, days: float) -> list[str]:
    broken: list[str] = []
    invocations = result.figures["gpuwarden_invocations"]
    ended = len(result.gpuwarden_results) + len(result.failures)
    if ended != invocations:
        broken.append(f"{invocations} invocations, {ended} ended with a result or a failure")
    for doc in result.gpuwarden_results:
        event_id = doc.get("event_id")
        if (
            doc.get("outcome") in ("handled", "ignored", "duplicate")
            and event_id
            and not gpuwarden_ledger.get(event_id)
        ):
            broken.append(f"{event_id}: {doc.get('outcome')} but not in the ledger")
    # a gang's ranks come back under their own names after a restart, so a name may stop again in a
    # later life; one life stops once: a stop before the previous one ended is the same life's
    lives: dict[str, list[Any]] = {}
    for loss in result.ledger.losses:
        lives.setdefault(loss.pod, []).append(loss)
    for pod, stops in lives.items():
        stops.sort(key=lambda loss: loss.stopped_at)
        for before, after in itertools.pairwise(stops):
            if after.stopped_at <= before.ended_at:
                broken.append(
                    f"{pod} stopped twice in one life (at {before.stopped_at:.0f} s and {after.stopped_at:.0f} s)"
                )
    for name, book in result.ledger.nodes.items():
        if book.down_at is not None and book.down_at < book.up_at:
            broken.append(f"{name} went down before it came up")
        paid = ((book.down_at if book.down_at is not None else days * 86400) - book.up_at) * book.gpus
        if book.idle_gpu_seconds > paid + 1e-6:
            broken.append(f"{name}: idle {book.idle_gpu_seconds:.0f} GPU-s > paid {paid:.0f}")
    return broken


def measure(days: float = DAYS, scale: int = SCALE) -> tuple[list[Figure], dict[str, Any]]:
    scenario = scaled(scale)
    nodes = sum(p.nodes for p in scenario.pools)
    incidents = generate(scenario, scenario.seed, days)
    began = time.monotonic()
    result = run_arm(scenario, Arm.GPUWARDEN, incidents, days)
    seconds = time.monotonic() - began
    broken = _reconcile(result, result.gpuwarden_ledger, days)
    if broken:
        raise SoakBroken("; ".join(broken[:10]))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    invocations = result.figures["gpuwarden_invocations"]
    note = f"{days:g} days, {nodes} nodes at start, {len(incidents)} incidents, {invocations} invocations"
    figures = [
        figure("soak: invocations through the pipeline", "per s", [invocations / seconds], note=note),
        figure("soak: simulated days per real minute", "days", [days / (seconds / 60.0)], note=note),
        figure("soak: peak RSS (runner + simulator + gpuwarden)", "MB", [rss_mb], note=note),
    ]
    return figures, {"soak": {"figures": result.figures, "real_seconds": round(seconds, 1), "reconciled": True}}
