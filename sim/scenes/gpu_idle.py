"""Demo scene: a fleet-wide GPU-idle alarm names one idle node; gpuwarden reclaims it."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sim.builders import daemonset_pod, gpu_node, inference_pod, nodeclaim_for, nodepool, training_pod
from sim.clock import rfc3339

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim
    from sim.scenes.base import SceneSummary

POOL = "gpu-inference"
IDLE_NODE = "ip-10-0-5-50.us-west-2.compute.internal"
IDLE_INSTANCE = "i-0" + hashlib.sha256(IDLE_NODE.encode()).hexdigest()[:16]
BUSY_NODE = "ip-10-0-5-51.us-west-2.compute.internal"
_LABELS = {"retire": "retired", "retire-skipped": "not retired", "release": "given back", "refused": "SKIPPED"}


def _put_idle_utilization(cluster: str, instance_id: str, node: str) -> None:
    import boto3

    now = datetime.now(UTC)
    dims = [
        {"Name": "ClusterName", "Value": cluster},
        {"Name": "InstanceId", "Value": instance_id},
        {"Name": "NodeName", "Value": node},
    ]
    data = [
        {"MetricName": "node_gpu_utilization", "Dimensions": dims, "Timestamp": now - timedelta(minutes=m), "Value": v}
        for m, v in zip(range(56, 0, -5), [2.0, 0.0, 0.0, 1.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0], strict=True)
    ]
    boto3.client("cloudwatch", region_name="us-west-2").put_metric_data(Namespace="ContainerInsights", MetricData=data)


def _build(sim: KubeSim) -> str:
    sim.create(nodepool(POOL))
    claim = ""
    for name, instance in ((IDLE_NODE, IDLE_INSTANCE), (BUSY_NODE, "i-0" + hashlib.sha256(b"busy").hexdigest()[:16])):
        node = sim.create(gpu_node(name, instance, nodepool=POOL, instance_type="g5.12xlarge", gpus=4))
        made = sim.create(nodeclaim_for(node))
        claim = claim or made["metadata"]["name"]
        sim.create(daemonset_pod(node, name=f"nvidia-device-plugin-{name[:12]}"))
    sim.create(training_pod("notebook-0", IDLE_NODE, gpus=1, checkpoint="annotate", namespace="research"))
    sim.create(inference_pod("reranker-0", IDLE_NODE, labels={"app": "reranker"}, grace=10))
    return claim


def gpu_idle_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from sim.scenes.base import EVENTS, SceneSummary, scene_deps, timeline_line

    claim = _build(sim)
    deps = scene_deps(sim)
    _put_idle_utilization(deps.policy.cluster, IDLE_INSTANCE, IDLE_NODE)
    event = json.loads((EVENTS / "cloudwatch-alarm-contributor-state-change.json").read_text())
    event["time"] = rfc3339(sim.clock.now())
    event["detail"]["alarmContributor"]["attributes"] = {"InstanceId": IDLE_INSTANCE, "NodeName": IDLE_NODE}
    start = sim.clock.now().replace(microsecond=0)
    print(f"\nGPU-idle reclaim — fleet alarm contributor {IDLE_NODE} in ALARM (< 10 % for 1 h)")
    print(f"  +  0.00s  {'notice':<13} {event['detail-type']} (NodeClaim {claim})")
    result = handle_batch(parse_notices(event), deps).to_json()
    for action in result["actions"]:
        if action["type"] in ("eviction-blocked", "checkpoint-delivered"):
            continue
        line = timeline_line(action, start)
        label = _LABELS.get(action["type"])
        print(line.replace(action["type"], label, 1) if label else line)
    print(f"  {result['outcome']}: {result['reason']}")
    return SceneSummary.of("gpu-idle reclaim", result)
