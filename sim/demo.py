"""`gpuwarden demo`: sample events through the real handlers on a simulated cluster and AWS.

Nothing here is faked on gpuwarden's side: the same services, adapters and Kubernetes client
as deployed, talking HTTP to the simulator; AWS is moto. The simulated workloads acknowledge
checkpoints the way a training job would, and a simulated Karpenter turns NodeClaims into nodes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sim.builders import daemonset_pod, gpu_node, inference_pod, job, mirror_pod, nodepool, pdb, training_pod
from sim.clock import rfc3339
from sim.controllers import ReplicaSetReplacer
from sim.core import KubeSim
from sim.karpenter import Karpenter
from sim.wiring import sim_deps
from sim.workloads import Workloads

EVENTS = Path(__file__).resolve().parents[1] / "events"
NODE = "ip-10-0-1-23.us-west-2.compute.internal"
INSTANCE = "i-0abc1234def567890"


@dataclass
class SceneSummary:
    scene: str
    outcome: str
    nodes: int
    checkpointed: int
    evicted: int
    seconds_left: float | None


def build_cluster(sim: KubeSim) -> None:
    sim.create(nodepool("gpu-training"))
    node = sim.create(gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    other = sim.create(gpu_node("ip-10-0-2-40.us-west-2.compute.internal", "i-0fedcba9876543210", zone="us-west-2b"))
    modes = ["signal:SIGUSR1", "annotate", "exec:python /app/checkpoint.py --fast"]
    for i, mode in enumerate(modes):
        owner = sim.create(job(f"llama-ft-{i}", "ml"))
        sim.create(training_pod(f"llama-ft-{i}-worker", node, gpus=2, checkpoint=mode, owner=owner, grace=20))
    for n in (node, other):
        sim.create(daemonset_pod(n))
    sim.create(mirror_pod("kube-proxy", node))
    labels = {"app": "inference"}
    for i in range(2):
        sim.create(inference_pod(f"triton-{i}", node, labels=labels, grace=15))
        sim.create(inference_pod(f"triton-b{i}", other, labels=labels, grace=15))
    sim.create(pdb("inference", "serving", labels, min_available=3))


@contextmanager
def simulated_aws() -> Iterator[None]:
    from moto import mock_aws

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="demo", AWS_SECRET_ACCESS_KEY="demo", AWS_DEFAULT_REGION="us-west-2")  # noqa: S106
    try:
        with mock_aws():
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _deps(sim: KubeSim) -> Any:
    return sim_deps(sim, caller="demo")


_LABELS = {
    "cordon": "cordoned",
    "checkpoint-requested": "asked",
    "signal": "signalled",
    "checkpoint-delivered": "delivered",
    "checkpoint-ack": "ack",
    "evict": "evicted",
    "delete": "deleted",
    "eviction-blocked": "PDB 429",
    "replacement": "replacement",
    "replacement-skipped": "no replacement",
    "drain-complete": "drained",
    "drain-blocked": "BLOCKED",
}


def _line(action: dict[str, Any], start: datetime) -> str:
    from dateutil.parser import isoparse

    offset = (isoparse(action["at"]) - start).total_seconds()
    what = action.get("pod") or action.get("target") or action.get("taint") or ""
    why = action.get("reason") or action.get("result") or ""
    if action["type"] == "drain-complete" and "seconds_left" in action:
        why = f"{action['seconds_left']:.1f} s of the notice left"
    return f"  +{offset:6.2f}s  {_LABELS.get(action['type'], action['type']):<13} {what:<34} {why}"


def spot_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.services.routes import handle_batch
    from gpuwarden.sources import parse_notices

    event = json.loads((EVENTS / "spot-interruption.json").read_text())
    event["time"] = rfc3339(sim.clock.now())
    start = sim.clock.now().replace(microsecond=0)
    print(f"\nScene 1 — Spot interruption warning for {INSTANCE} ({NODE}), 120 s notice")
    print(f"  +  0.00s  {'notice':<13} {event['detail-type']}")
    result = handle_batch(parse_notices(event), _deps(sim)).to_json()
    shown: set[tuple[str, str]] = set()
    for action in result["actions"]:
        key = (action["type"], str(action.get("pod")))
        if action["type"] not in _LABELS or (action["type"] == "eviction-blocked" and key in shown):
            continue
        shown.add(key)
        print(_line(action, start))
    actions = result["actions"]
    return SceneSummary(
        scene="spot interruption",
        outcome=result["outcome"],
        nodes=1,
        checkpointed=sum(1 for a in actions if a["type"] == "evict" and a.get("reason") == "checkpoint acknowledged"),
        evicted=sum(1 for a in actions if a["type"] in ("evict", "delete")),
        seconds_left=result.get("seconds_left"),
    )


#: The tour, in order. A scene takes the running simulator (with the cluster of
#: `build_cluster`, Workloads, Karpenter and the ReplicaSet controller installed) and
#: returns its summary row. Add a scene: write `def my_scene(sim) -> SceneSummary` (in its
#: own module under sim/scenes/ if it is long) and append it here.
SCENES: list[Callable[[KubeSim], SceneSummary]] = [spot_scene]
SCENES.append(__import__("sim.scenes.gpu_idle", fromlist=["gpu_idle_scene"]).gpu_idle_scene)
SCENES.append(__import__("sim.scenes.runbook", fromlist=["runbook_scene"]).runbook_scene)
SCENES.append(__import__("sim.scenes.windows", fromlist=["windows_scene"]).windows_scene)
SCENES.append(__import__("sim.scenes.karpenter", fromlist=["karpenter_scene"]).karpenter_scene)
SCENES.append(__import__("sim.scenes.capacity_block", fromlist=["capacity_block_scene"]).capacity_block_scene)


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
    print(f"  {'scene':<20} {'outcome':<9} {'nodes':>5} {'ckpt':>5} {'evicted':>7} {'left of notice':>15}")
    for s in summaries:
        left = "-" if s.seconds_left is None else f"{s.seconds_left:.1f} s"
        print(f"  {s.scene:<20} {s.outcome:<9} {s.nodes:>5} {s.checkpointed:>5} {s.evicted:>7} {left:>15}")
    print(f"\ndemo finished in {time.monotonic() - began:.1f} s real time")
    return 0 if all(s.outcome == "handled" for s in summaries) else 1
