"""Demo scene: `gpuwarden doctor` on the demo cluster, then the same Spot warning with Karpenter's
interruption queue on.

The doctor warns that Karpenter consumes an interruption queue and that the training pod lacks
`karpenter.sh/do-not-disrupt`; the team adds it to the pod template, as the fix says. Then
Karpenter (sim/karpenter.py, modelled on its source) gets the warning from its SQS queue first:
it deletes the NodeClaim, taints and drains the node (passing over the protected trainer) and
its provisioner launches the replacement. gpuwarden, a few hundred milliseconds later, sees the
NodeClaim deleting and leaves the replacement to Karpenter, asks the trainer to checkpoint and
evicts it after the acknowledgement; Karpenter then finishes the node.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sim.actors.karpenter import DO_NOT_DISRUPT, Karpenter, KarpenterAction, MessageKind, karpenter_deployment
from sim.builders import daemonset_pod, gpu_node, inference_pod, job, nodeclaim_for, nodepool, training_pod
from sim.clock import rfc3339

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim
    from sim.scenes.base import SceneSummary

POOL = "gpu-spot"
NODE = "ip-10-0-7-70.us-west-2.compute.internal"
INSTANCE = "i-0c0ffee0dec0de707"
GPUWARDEN_BEHIND_SECONDS = 0.3  # real seconds between Karpenter's SQS receive and gpuwarden's invocation
_SHOWN = ("nodeclaim-deleted", "tainted", "evicted", "force-deleted", "nodeclaim-created", "launched", "node-finalized")
_LABELS = {
    "nodeclaim-deleted": "K: NodeClaim deleted",
    "tainted": "K: disrupted",
    "evicted": "K: evicted",
    "force-deleted": "K: force-deleted",
    "nodeclaim-created": "K: replacement",
    "launched": "K: launched",
    "node-finalized": "K: node gone",
}


def _build(sim: KubeSim) -> str:
    pool = nodepool(POOL, instance_types=("p5.48xlarge", "p4d.24xlarge"))
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "10m"
    sim.create(pool)
    node = sim.create(gpu_node(NODE, INSTANCE, zone="us-west-2a", instance_type="p5.48xlarge", nodepool=POOL))
    claim = nodeclaim_for(node)
    claim["spec"]["terminationGracePeriod"] = "10m"
    name = str(sim.create(claim)["metadata"]["name"])
    sim.create(daemonset_pod(node, name="nvidia-device-plugin-k7"))
    owner = sim.create(job("llama-pretrain", "ml"))
    sim.create(training_pod("llama-pretrain-worker", node, gpus=8, checkpoint="annotate", owner=owner, grace=30))
    sim.create(inference_pod("embedder-0", node, labels={"app": "embedder"}, gpus=0, grace=10))
    sim.create(karpenter_deployment(queue="ml-prod-interruptions"))
    return name


def _karpenter_line(action: KarpenterAction, start: datetime) -> str:
    offset = (action.at - start).total_seconds()
    return f"  +{offset:6.2f}s  {_LABELS[action.type]:<22} {action.target:<34} {action.detail[:60]}"


def karpenter_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from sim.scenes.base import EVENTS, SceneSummary, scene_deps, timeline_line

    karpenter = Karpenter.running_on(sim) or Karpenter(sim).start()
    claim = _build(sim)
    print(f"\nScene — Karpenter's interruption queue is on; first, on-call asks the doctor about {POOL}")
    _doctor(sim)
    karpenter.interruption_queue = True
    seen = len(karpenter.actions)
    event = json.loads((EVENTS / "spot-interruption.json").read_text())
    event["time"] = rfc3339(sim.clock.now())
    event["detail"]["instance-id"] = INSTANCE
    event["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{INSTANCE}"]
    start = sim.clock.now().replace(microsecond=0)
    trainer = "llama-pretrain-worker"
    print(f'  the team adds karpenter.sh/do-not-disrupt: "true" to the template of ml/{trainer}, as the fix says')
    sim.patch_direct("Pod", trainer, {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}}, "ml")
    behind = f"{GPUWARDEN_BEHIND_SECONDS * 1000:.0f} ms"
    print(f"\n  The same Spot warning for {NODE}: Karpenter's queue first, gpuwarden {behind} later")
    print(f"  +  0.00s  {'notice':<13} {event['detail-type']}")
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    time.sleep(GPUWARDEN_BEHIND_SECONDS)
    result = handle_batch(parse_notices(event), scene_deps(sim)).to_json()
    sim.wait_until(lambda: sim.get("Node", NODE) is None and not karpenter.batching, timeout=30)
    sim.wait_until(lambda: all(_launched(sim, c) for c in karpenter.created_nodeclaims()), timeout=30)
    lines: list[tuple[datetime, str]] = []
    for action in result["actions"]:
        if action["type"] not in ("eviction-blocked", "checkpoint-delivered"):
            from dateutil.parser import isoparse

            lines.append((isoparse(action["at"]), timeline_line(action, start)))
    ours = {NODE, claim, "ml/llama-pretrain-worker", "serving/embedder-0"}
    for action in karpenter.actions[seen:]:
        related = action.target in ours or any(name in action.detail for name in ours)
        if action.type in _SHOWN and (related or action.type == "launched"):
            lines.append((action.at, _karpenter_line(action, start)))
    for _, line in sorted(lines, key=lambda item: item[0]):
        print(line)
    print(f"  {result['outcome']}: {result['reason']}")
    replacements = [
        f"{c} -> {(sim.get('NodeClaim', c) or {}).get('status', {}).get('nodeName')}"
        for c in karpenter.created_nodeclaims()
    ]
    print(f"  replacement: Karpenter's {', '.join(replacements) or 'none'}; gpuwarden's: {_ours(result)}")
    karpenter.interruption_queue = False
    return SceneSummary.of("spot + Karpenter", result)


def _launched(sim: KubeSim, claim: str) -> bool:
    return bool(((sim.get("NodeClaim", claim) or {}).get("status") or {}).get("nodeName"))


def _ours(result: dict[str, Any]) -> str:
    launched = [a for a in result["actions"] if a["type"] == "replacement"]
    skipped = [a for a in result["actions"] if a["type"] == "replacement-skipped"]
    if launched:
        return str(launched[0].get("target"))
    return f"none ({skipped[0].get('reason')})" if skipped else "none"


def _doctor(sim: KubeSim) -> None:
    from gpuwarden.adapters.cluster_reads import ClusterReads, cluster_has_gpu_metric
    from gpuwarden.domain.policy import Policy
    from gpuwarden.kinds.registry import DOCTOR_CHECKS, SWITCHES
    from gpuwarden.services.doctor.doctor import diagnose
    from gpuwarden.terminal import doctor_table as render_table

    print("  $ gpuwarden doctor        (on the demo cluster)")
    policy = Policy(cluster="ml-prod")
    report = diagnose(
        ClusterReads(sim.api_client()),
        policy,
        None,
        lambda c: cluster_has_gpu_metric("us-west-2", c),
        sim.clock.now(),
        switches=SWITCHES,
        kind_checks=DOCTOR_CHECKS,
    )
    for line in render_table(report).splitlines():
        print(f"    {line}")
