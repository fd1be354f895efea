"""Scene 1: a Spot interruption warning, 120 s notice, on the demo cluster's first node."""

from __future__ import annotations

import json

from sim.apiserver.core import KubeSim
from sim.clock import rfc3339
from sim.scenes.base import EVENTS, INSTANCE, NODE, TIMELINE_LABELS, SceneSummary, scene_deps, timeline_line


def spot_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch

    event = json.loads((EVENTS / "spot-interruption.json").read_text())
    event["time"] = rfc3339(sim.clock.now())
    start = sim.clock.now().replace(microsecond=0)
    print(f"\nScene 1 — Spot interruption warning for {INSTANCE} ({NODE}), 120 s notice")
    print(f"  +  0.00s  {'notice':<13} {event['detail-type']}")
    result = handle_batch(parse_notices(event), scene_deps(sim)).to_json()
    shown: set[tuple[str, str]] = set()
    for action in result["actions"]:
        key = (action["type"], str(action.get("pod")))
        if action["type"] not in TIMELINE_LABELS or (action["type"] == "eviction-blocked" and key in shown):
            continue
        shown.add(key)
        print(timeline_line(action, start))
    return SceneSummary.of("spot interruption", result)
