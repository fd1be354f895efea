"""`gpuwarden demo --real`: the tour's main scenes on the real control plane (docs/realplane.md).

Nothing is placed by hand: the workloads are applied as a user applies them, real Karpenter
launches KWOK nodes for their pods, kube-scheduler binds them, KWOK runs each checkpoint command
that gpuwarden sends through the API server's pods/exec; `gpuwarden invoke` (the console script,
as a user runs it) handles EC2's Spot warning for the node's instance (moto). Each scene prints
gpuwarden's timeline and what real Karpenter did with its NodeClaim.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from realplane.aws import REGION, AwsWorld, start_moto
from realplane.plane.harness import Plane

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
GPU = "nvidia.com/gpu"
TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
CHECKPOINT = "exec:sh -c 'sleep 0.2'"  # KWOK runs it here: exit 0 is the acknowledgement
Obj = dict[str, Any]


def _spec(gpus: int, **more: Any) -> Obj:
    resources = {"requests": {GPU: str(gpus), "cpu": "1", "memory": "4Gi"}, "limits": {GPU: str(gpus)}}
    container = {"name": "main", "image": "registry.local/gpu-workload:1", "resources": resources}
    return {"tolerations": [TOLERATION], "containers": [container], **more}


def _job(name: str, gpus: int, ranks: int = 1) -> Obj:
    spec: Obj = {
        "backoffLimit": 6,
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": {"gpuwarden.io/checkpoint": CHECKPOINT}},
            "spec": _spec(gpus, restartPolicy="Never"),
        },
    }
    if ranks > 1:
        spec |= {"completions": ranks, "parallelism": ranks, "completionMode": "Indexed"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _ready(conditions: Any) -> bool:
    """A Ready condition that is True, in a client object's or a dict's conditions."""
    for c in conditions or []:
        kind, status = (c.get("type"), c.get("status")) if isinstance(c, dict) else (c.type, c.status)
        if kind == "Ready" and status == "True":
            return True
    return False


class Tour:
    def __init__(self, plane: Plane, aws: AwsWorld, work: Path) -> None:
        from kubernetes import client

        self.plane, self.aws, self.work = plane, aws, work
        api = plane.api_client()
        self.core: Any = client.CoreV1Api(api)
        self.apps: Any = client.AppsV1Api(api)
        self.batch: Any = client.BatchV1Api(api)
        self.policy: Any = client.PolicyV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)

    # ------------------------------------------------------------------ the cluster

    def namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name}})
        accounts = self.core.list_namespaced_service_account
        self.plane.wait_for(f"ServiceAccount {name}/default", lambda: accounts(name).items)

    def running(self, namespace: str, selector: str, count: int) -> list[Any]:
        def ready() -> list[Any] | None:
            found = self.core.list_namespaced_pod(namespace, label_selector=selector).items
            pods = [p for p in found if not p.metadata.deletion_timestamp]
            ok = len(pods) == count and all(p.status.phase == "Running" and _ready(p.status.conditions) for p in pods)
            return pods if ok else None

        pods: list[Any] = self.plane.wait_for(f"{count} pods {selector} running", ready, timeout=240)
        return pods

    def namespaces(self) -> set[str]:
        return {n.metadata.name for n in self.core.list_namespace().items}

    def claims(self) -> list[Obj]:
        found: list[Obj] = self.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
        return found

    def clear(self, namespaces: list[str]) -> None:
        for ns in namespaces:
            self.core.delete_namespace(ns)
        names = set(namespaces)
        self.plane.wait_for("the namespaces gone", lambda: not names & self.namespaces(), 240)
        for claim in self.claims():
            with contextlib.suppress(Exception):
                self.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
        self.plane.wait_for("the nodes gone", lambda: not self.claims() and not self.core.list_node().items, 240)

    def node_line(self, name: str) -> str:
        labels = self.core.read_node(name).metadata.labels or {}
        keys = ("node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type")
        return f"{name} ({'/'.join(labels.get(k, '?') for k in keys)})"

    # ------------------------------------------------------------------ gpuwarden, as a user runs it

    def invoke_spot_warning(self, node: str) -> Obj:
        labels = self.core.read_node(node).metadata.labels or {}
        instance = self.aws.instance_for_node({"metadata": {"name": node, "labels": labels}})
        event: Obj = json.loads((EVENTS / "spot-interruption.json").read_text())
        zone_arn = event["resources"][0].rsplit("/", 1)[0]
        event.update(time=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), resources=[f"{zone_arn}/{instance}"])
        event["detail"]["instance-id"] = instance
        path = self.work / f"spot-{instance}.json"
        path.write_text(json.dumps(event))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
        env |= {
            "KUBECONFIG": str(self.plane.kubeconfig_for("gpuwarden")),
            "AWS_ENDPOINT_URL": self.aws.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": REGION,
            "GPUWARDEN_CLUSTER": "ml-prod",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
        gpuwarden = Path(sys.executable).with_name("gpuwarden")
        done = subprocess.run(  # noqa: S603 - the console script, as a user runs it
            [str(gpuwarden), "invoke", str(path)], capture_output=True, text=True, env=env, timeout=300, check=False
        )
        print(f"  $ gpuwarden invoke spot-warning.json   # EC2 Spot warning for {instance}, 120 s notice")
        try:
            result: Obj = json.loads(done.stdout)
        except ValueError:
            raise RuntimeError(f"gpuwarden invoke exited {done.returncode}: {done.stderr[-2000:]}") from None
        return result

    def timeline(self, result: Obj) -> None:
        from gpuwarden.terminal import TIMELINE_LABELS, timeline_line

        actions = result["actions"]
        first = min((datetime.fromisoformat(a["at"]) for a in actions), default=datetime.now(UTC))
        start = first.replace(microsecond=0)
        shown: set[tuple[str, str]] = set()
        for action in actions:
            key = (action["type"], str(action.get("pod")))
            if action["type"] not in TIMELINE_LABELS or (action["type"] == "eviction-blocked" and key in shown):
                continue
            shown.add(key)
            print(timeline_line(action, start))
        print(f"  {result['outcome']}: {result.get('reason') or ''}")

    def replacement(self, node: str, moved: Callable[[], list[Any]]) -> None:
        name = (self.core.read_node(node).metadata.annotations or {}).get("gpuwarden.io/replacement", "")
        if not name.startswith("nodeclaim/"):
            print(f"  no replacement NodeClaim ({name or 'none'})")
            return
        claim = name.removeprefix("nodeclaim/")

        def ready() -> Obj | None:
            found: Obj = self.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim)
            ok = _ready(found.get("status", {}).get("conditions"))
            return found if ok and found["status"].get("nodeName") else None

        found = self.plane.wait_for(f"NodeClaim {claim} Ready", ready, timeout=180)
        print(f"  Karpenter launched gpuwarden's {name}: Ready node {self.node_line(found['status']['nodeName'])}")
        where = {p.spec.node_name for p in moved()}
        print(f"  the displaced pods run on {', '.join(sorted(where))}; NodeClaims now: {len(self.claims())}")

    # ------------------------------------------------------------------ scenes

    def spot(self) -> str:
        print("\nScene 1 — a Spot warning for a node real Karpenter launched (inference behind a PDB, a trainer)")
        self.namespace("serving")
        self.namespace("ml")
        labels = {"app": "inference"}
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "inference"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": _spec(1)},
            },
        }
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "inference"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        }
        self.apps.create_namespaced_deployment("serving", deployment)
        self.policy.create_namespaced_pod_disruption_budget("serving", pdb)
        self.batch.create_namespaced_job("ml", _job("trainer", 4))
        (trainer,) = self.running("ml", "app=trainer", 1)
        self.running("serving", "app=inference", 2)
        node = trainer.spec.node_name
        print(f"  Karpenter launched {self.node_line(node)}; kube-scheduler bound 2 replicas and the trainer there")
        result = self.invoke_spot_warning(node)
        self.timeline(result)
        moved = lambda: self.running("serving", "app=inference", 2) + self.running("ml", "app=trainer", 1)  # noqa: E731
        self.replacement(node, moved)
        self.clear(["serving", "ml"])
        return str(result["outcome"])

    def gang(self) -> str:
        print("\nScene 2 — a four-rank Indexed Job (torchrun --nnodes=4), a Spot warning for rank 1's node")
        self.namespace("ml")
        self.batch.create_namespaced_job("ml", _job("llama-ddp", 8, ranks=4))
        ranks = self.running("ml", "app=llama-ddp", 4)
        rank = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in ranks}
        node = rank["1"].spec.node_name
        print(f"  Karpenter launched 4 nodes, one rank each; rank 1 runs on {self.node_line(node)}")
        result = self.invoke_spot_warning(node)
        self.timeline(result)
        asked = sorted({a["pod"] for a in result["actions"] if a["type"] == "checkpoint-requested"})
        evicted = [a["pod"] for a in result["actions"] if a["type"] == "evict"]
        print(f"  ranks asked: {len(asked)} of 4; evicted: {len(evicted)} (rank 1 only)")
        back = lambda: [  # noqa: E731
            p
            for p in self.running("ml", "app=llama-ddp", 4)
            if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"
        ]
        self.replacement(node, back)
        self.clear(["ml"])
        return str(result["outcome"])


def run_tour() -> int:
    began = time.monotonic()
    logs = Path(tempfile.mkdtemp(prefix="gpuwarden-real-demo-"))
    print("gpuwarden demo --real: a real control plane on this machine (etcd, kube-apiserver,")
    print("  kube-controller-manager, kube-scheduler), KWOK as every node's kubelet, real Karpenter (KWOK")
    print(f"  provider), moto as EC2; component logs in {logs}", flush=True)
    with start_moto() as aws, Plane(artifacts=logs) as plane:
        print(f"  plane up in {time.monotonic() - began:.0f} s", flush=True)
        tour = Tour(plane, aws, logs)
        outcomes = [tour.spot(), tour.gang()]
    print(f"\ndemo --real finished in {time.monotonic() - began:.0f} s: {', '.join(outcomes)}")
    return 0 if all(o == "handled" for o in outcomes) else 1
