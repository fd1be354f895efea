"""`gpuwarden demo --serve --real`: the real control plane kept up as a sandbox (docs/realplane.md).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK as every node's kubelet and
Karpenter's KWOK provider with the tour's `gpu-training` NodePool; JobSet's CRD, controller and
webhooks; moto in server mode as EC2. A user's own manifests (an Indexed Job, a Deployment, a
JobSet, which makes its Jobs) are admitted, Karpenter launches KWOK nodes for their pods and
kube-scheduler binds them there. Each node Karpenter registers gets its EC2 instance in moto (its
`PrivateDnsName` is the node's name, as gpuwarden finds EKS nodes), printed as it appears, so a
Spot warning for it can be invoked.
The `export` lines go to stdout; up until Ctrl-C (SIGINT) or SIGTERM.
"""

from __future__ import annotations

import json
import shlex
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from realplane.aws import start_moto
from realplane.plane.harness import CLUSTER_NAME, KWOK_NODE_ANNOTATION, Plane
from sim.serve import exports

CLUSTER = CLUSTER_NAME  # the plane's kubeconfig names it: the policy must too
SAMPLE = "i-0abc1234def567890"  # the instance id in events/spot-interruption-empty-time.json


class NodeInstances:
    """Launches, in moto, the instance behind each KWOK node Karpenter registers, and says so."""

    def __init__(self, plane: Plane, launch: Any, stop: threading.Event) -> None:
        self.plane, self.launch, self.stop = plane, launch, stop
        self.instances: dict[str, str] = {}
        self.thread = threading.Thread(target=self._run, name="node-instances", daemon=True)

    def _run(self) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(self.plane.api_client())
        while not self.stop.wait(1.0):
            try:
                nodes = core.list_node().items
            except Exception:  # noqa: S112 - the API server busy or restarting: look again
                continue
            for node in nodes:
                name = node.metadata.name
                if name in self.instances or (node.metadata.annotations or {}).get(KWOK_NODE_ANNOTATION) != "fake":
                    continue
                labels = node.metadata.labels or {}
                self.instances[name] = self.launch({"metadata": {"name": name, "labels": labels}})
                kind = "/".join(
                    labels.get(k, "?")
                    for k in (
                        "node.kubernetes.io/instance-type",
                        "topology.kubernetes.io/zone",
                        "karpenter.sh/capacity-type",
                    )
                )
                print(f"# node {name} ({kind}) is EC2 instance {self.instances[name]}", flush=True)


def serve() -> int:
    stop = threading.Event()

    def stopped(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, stopped) for s in (signal.SIGINT, signal.SIGTERM)}
    logs = Path(tempfile.mkdtemp(prefix="gpuwarden-real-sandbox-"))
    try:
        print("# starting the real control plane (etcd, kube-apiserver, controller-manager, scheduler,", flush=True)
        print(f"# KWOK, Karpenter's KWOK provider, JobSet's controller); component logs in {logs}", flush=True)
        with start_moto() as aws, Plane(artifacts=logs, jobset=True, kubelet_deletes=True) as plane:
            policy = logs / "policy.yaml"
            policy.write_text(json.dumps({"cluster": CLUSTER}, indent=2) + "\n")
            watcher = NodeInstances(plane, aws.instance_for_node, stop)
            watcher.thread.start()
            env = exports(plane.kubeconfig, policy, aws.endpoint)  # as the simulator's sandbox says them
            print("# gpuwarden sandbox on a real control plane: NodePool gpu-training (p4d/p5, GPU taint), JobSet")
            print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()), flush=True)
            print("# then: kubectl apply -f your-indexed-job.yaml (pods tolerate nvidia.com/gpu and request GPUs);")
            print("#       Karpenter launches KWOK nodes, each printed here with its EC2 instance; then, for one:")
            print(f"#       sed s/{SAMPLE}/<instance>/ events/spot-interruption-empty-time.json | gpuwarden invoke -")
            print("#       gpuwarden runbook plan --node <node>; gpuwarden release --all. Ctrl-C stops.", flush=True)
            stop.wait()
            watcher.thread.join(timeout=5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("# sandbox stopped", flush=True)
    return 0
