"""Demo scene: budget windows. A GPU-idle reclaim is refused at 10:00 on a weekday in Seoul
(business-hours freeze) and accepted in the night window; the NodePools' disruption budgets
and GPU cap follow the windows and come back exactly in the morning.

Window decisions run on a fixed clock per step, as ``GPUWARDEN_NOW`` gives the CLI
(``deps.window_clock``); the drain itself runs on the simulator's clock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sim.builders import daemonset_pod, gpu_node, nodeclaim_for, nodepool, training_pod
from sim.clock import rfc3339

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim
    from sim.scenes.base import SceneSummary

POOL = "gpu-batch"
NODE = "ip-10-0-8-80.us-west-2.compute.internal"
INSTANCE = "i-0" + hashlib.sha256(NODE.encode()).hexdigest()[:16]
OTHER = "ip-10-0-8-81.us-west-2.compute.internal"
FREEZE = "business-hours-freeze"
POLICY: dict[str, Any] = {
    "cluster": "ml-prod",
    "windows": [
        {
            "name": FREEZE,
            "schedule": "0 9 * * MON-FRI",
            "timezone": "Asia/Seoul",
            "duration": "10h",
            "max_disruptions": 0,
            "nodepools": [POOL],
        },
        {
            "name": "night-cap",
            "schedule": "0 22 * * *",
            "timezone": "UTC",
            "duration": "8h",
            "max_disruptions": 1,
            "gpu_limit": 16,
            "nodepools": [POOL],
        },
    ],
}
MONDAY_10_KST = datetime(2026, 6, 1, 1, 0, tzinfo=UTC)
NIGHT = datetime(2026, 6, 1, 23, 0, tzinfo=UTC)  # Tuesday 08:00 in Seoul: before the freeze
EVENING = datetime(2026, 6, 2, 10, 30, tzinfo=UTC)  # Tuesday 19:30 in Seoul: every window closed


def _build(sim: KubeSim) -> None:
    sim.create(nodepool(POOL, gpu_limit=32, budgets=[{"nodes": "10%"}]))
    for name in (NODE, OTHER):
        instance = INSTANCE if name == NODE else "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
        node = sim.create(gpu_node(name, instance, nodepool=POOL, instance_type="g5.12xlarge", gpus=4))
        sim.create(nodeclaim_for(node))
        sim.create(daemonset_pod(node, name=f"nvidia-device-plugin-{name[:12]}"))
    sim.create(training_pod("sweep-7", NODE, gpus=1, checkpoint="annotate", namespace="research"))


def _idle_metrics() -> None:
    import boto3

    now = datetime.now(UTC)
    dims = [
        {"Name": "ClusterName", "Value": "ml-prod"},
        {"Name": "InstanceId", "Value": INSTANCE},
        {"Name": "NodeName", "Value": NODE},
    ]
    data = [
        {
            "MetricName": "node_gpu_utilization",
            "Dimensions": dims,
            "Timestamp": now - timedelta(minutes=m),
            "Value": 0.5,
        }
        for m in range(56, 0, -5)
    ]
    boto3.client("cloudwatch", region_name="us-west-2").put_metric_data(Namespace="ContainerInsights", MetricData=data)


def _alarm(sim: KubeSim, event_id: str) -> dict[str, Any]:
    from sim.scenes.base import EVENTS

    event: dict[str, Any] = json.loads((EVENTS / "cloudwatch-alarm-contributor-state-change.json").read_text())
    event["id"], event["time"] = event_id, rfc3339(sim.clock.now())
    event["detail"]["alarmContributor"]["attributes"] = {"InstanceId": INSTANCE, "NodeName": NODE}
    return event


def _budgets(sim: KubeSim) -> str:
    """The pool's budgets and GPU limit, the owner's (saved while a window is open) told apart
    from what the windows added beside them."""
    pool = sim.get("NodePool", POOL) or {}
    spec = pool.get("spec") or {}
    budgets = (spec.get("disruption") or {}).get("budgets") or []
    gpu = (spec.get("limits") or {}).get("nvidia.com/gpu")
    saved = ((pool.get("metadata") or {}).get("annotations") or {}).get("gpuwarden.io/saved-budgets")
    if saved is None:
        return f"budgets {json.dumps(budgets)}, GPU limit {gpu}"
    own = json.loads(saved)
    added = budgets[len(own["budgets"] or []) :]
    limit = f"GPU limit {gpu}" + (f" (own {own['gpu_limit']})" if own["gpu_limit"] != gpu else "")
    return f"budgets own {json.dumps(own['budgets'])} + window {json.dumps(added)}, {limit}"


def _tick(sim: KubeSim, deps: Any, action: str, window: str | None, when: datetime) -> None:
    from gpuwarden.kinds.inputs import parse_scheduler_tick
    from gpuwarden.services.dispatch import handle_tick

    raw = {"gpuwarden": "budget-window", "action": action} | ({"window": window} if window else {})
    result = handle_tick(parse_scheduler_tick(raw), replace(deps, window_clock=lambda: when))
    wrote = sum(1 for a in result.actions if a["nodepool"] == POOL)
    label = f"{action} {window}" if window else action
    print(f"  {when:%a %H:%M}Z  tick {label:<31} {POOL}: {_budgets(sim)}" + ("" if wrote else " (in step)"))


def windows_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.domain.policy import Policy
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from sim.scenes.base import SceneSummary, checkpoint_counts, scene_deps

    _build(sim)
    _idle_metrics()
    deps = replace(scene_deps(sim), policy=Policy.model_validate(POLICY))
    print(f"\nBudget windows on pool {POOL} — {FREEZE} (09:00-19:00 Asia/Seoul, Mon-Fri, 0 disruptions)")
    print(f"  and night-cap (22:00-06:00 UTC, 1 disruption, GPU cap 16); a GPU-idle alarm names {NODE}")
    print(f"  {'':>10}  {'before':<36} {POOL}: {_budgets(sim)}")
    _tick(sim, deps, "open", FREEZE, MONDAY_10_KST)
    day = handle_batch(parse_notices(_alarm(sim, "demo-idle-day")), replace(deps, window_clock=lambda: MONDAY_10_KST))
    print(f"  {MONDAY_10_KST:%a %H:%M}Z  gpu-idle alarm (10:00 KST)               → {day.outcome}: {day.reason}")
    _tick(sim, deps, "open", "night-cap", NIGHT)
    night = handle_batch(parse_notices(_alarm(sim, "demo-idle-night")), replace(deps, window_clock=lambda: NIGHT))
    kinds = [a["type"] for a in night.actions]
    steps = ", ".join(f"{k} x{kinds.count(k)}" if kinds.count(k) > 1 else k for k in dict.fromkeys(kinds))
    print(f"  {NIGHT:%a %H:%M}Z  gpu-idle alarm (night)                   → {night.outcome}: {steps}")
    _tick(sim, deps, "close", FREEZE, EVENING)
    restored = (sim.get("NodePool", POOL) or {}).get("spec", {}).get("disruption", {}).get("budgets") == [
        {"nodes": "10%"}
    ]
    story = day.outcome == "ignored" and FREEZE in day.reason and night.outcome == "handled" and restored
    asked, checkpointed = checkpoint_counts(night.to_json())
    return SceneSummary(
        scene="budget windows",
        outcome="handled" if story else "failed",
        nodes=1,
        checkpointed=checkpointed,
        evicted=sum(1 for a in night.actions if a["type"] in ("evict", "delete")),
        seconds_left=None,
        asked=asked,
    )
