"""Demo scene: a Spot warning for one rank of the seed's four-rank Indexed Job
(`torchrun --nnodes=4 --node_rank=$(JOB_COMPLETION_INDEX)`, one p4d per rank, all in us-west-2b).

What to see: every rank of the job is asked to checkpoint (a DDP checkpoint is written by rank 0,
a sharded one by all ranks together), only the doomed rank is evicted, the ranks on healthy
nodes are left running, and the one replacement NodeClaim asks for the gang's zone, so
Karpenter brings the rank back next to the three others (docs/training-jobs.md, docs/cluster.md).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from sim.builders import gpu_node, nodepool
from sim.clock import rfc3339
from sim.scenes.base import EVENTS, TIMELINE_LABELS, SceneSummary, scene_deps, timeline_line
from sim.training_jobs import indexed_job, indexed_job_pod

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim

JOB = "llama-ddp"
ZONE = "us-west-2b"
RANKS = tuple((f"ip-10-0-9-{10 + r}.us-west-2.compute.internal", f"i-0a11ce{r:011x}") for r in range(4))
DOOMED = 1
ZONE_LABEL = "topology.kubernetes.io/zone"


def _build(sim: KubeSim) -> list[str]:
    if sim.get("NodePool", "gpu-training") is None:  # the demo's cluster has it; a scene run alone does not
        sim.create(nodepool("gpu-training"))
    sim.create(indexed_job(JOB, ranks=len(RANKS)))
    pods = []
    for rank, (name, instance) in enumerate(RANKS):
        node = sim.create(gpu_node(name, instance, zone=ZONE))
        body = indexed_job_pod(JOB, rank, node, checkpoint="annotate")
        body["spec"]["terminationGracePeriodSeconds"] = 20
        pod = sim.create(body)
        pods.append(f"ml/{pod['metadata']['name']}")
    return pods


def _launched_zone(sim: KubeSim, claim: str, wait_seconds: float = 10.0) -> str | None:
    """The zone Karpenter launched the NodeClaim in (the demo's Karpenter runs in the background)."""
    end = time.monotonic() + wait_seconds
    while time.monotonic() < end:
        found = sim.get("NodeClaim", claim)
        zone = ((found or {}).get("metadata") or {}).get("labels", {}).get(ZONE_LABEL)
        if zone:
            return str(zone)
        time.sleep(0.1)
    return None


def training_job_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch

    pods = _build(sim)
    name, instance = RANKS[DOOMED]
    event = json.loads((EVENTS / "spot-interruption.json").read_text())
    event["time"] = rfc3339(sim.clock.now())
    event["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}"]
    event["detail"]["instance-id"] = instance
    start = sim.clock.now().replace(microsecond=0)
    print(f"\nScene — a four-rank Indexed Job ({JOB}, torchrun --nnodes=4, one p4d per rank in {ZONE})")
    print(f"  Spot interruption warning for rank {DOOMED}'s node {name}, 120 s notice")
    print(f"  +  0.00s  {'notice':<13} {event['detail-type']}")
    result = handle_batch(parse_notices(event), scene_deps(sim)).to_json()
    for action in result["actions"]:
        if action["type"] in TIMELINE_LABELS:
            print(timeline_line(action, start))
    actions = result["actions"]
    asked = sorted({str(a.get("pod")) for a in actions if a["type"] == "checkpoint-requested"})
    evicted = [a for a in actions if a["type"] in ("evict", "delete")]
    left = [p for p in pods if sim.get("Pod", p.split("/")[1], "ml") is not None]
    print(f"  ranks asked: {len(asked)} of {len(pods)}; evicted: {len(evicted)}; ranks still running: {len(left)}")
    claim = next((str(a["target"]) for a in actions if a["type"] == "replacement"), "")
    if claim:
        zone = _launched_zone(sim, claim.split("/", 1)[-1])
        print(f"  replacement {claim} launched in {zone or 'not yet launched'} (the gang runs in {ZONE})")
    return SceneSummary.of("training job", result, evicted=len(evicted))
