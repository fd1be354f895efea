"""The tour's Spot scene on the real plane: real Karpenter launches the GPU node, KWOK is its
kubelet, kube-scheduler binds the pods; then gpuwarden handles a Spot warning for that node
through the real API server (docs/realplane.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain import annotations as ann
from realplane.aws import AwsWorld
from realplane.plane.harness import Plane, dump, dump_full
from tests.e2e.scene import SignalAcknowledger
from tests.e2e.world import (
    GPU,
    GPU_TOLERATION,
    GPUWARDEN_USER,
    NODEPOOL,
    Cluster,
    condition,
    invoke,
    rfc3339,
    running_and_ready,
    spot_warning,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.every_karpenter]

INFERENCE_REPLICAS = 2  # 1 GPU each: with the two trainers (4 + 2), one p4d.24xlarge (8 GPUs)


def _container(name: str, gpus: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.local/gpu-workload:1",
        "resources": {"requests": {GPU: str(gpus), "cpu": "1", "memory": "4Gi"}, "limits": {GPU: str(gpus)}},
    }


def inference(replicas: int) -> tuple[dict[str, Any], dict[str, Any]]:
    labels = {"app": "inference"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inference", "namespace": "serving"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"tolerations": [GPU_TOLERATION], "containers": [_container("server", 1)]},
            },
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "inference", "namespace": "serving"},
        "spec": {"minAvailable": replicas - 1, "selector": {"matchLabels": labels}},
    }
    return deployment, pdb


def trainer(name: str, checkpoint: str, gpus: int) -> dict[str, Any]:
    """A training Job of one pod, labelled app=<name>, that opts in to ``checkpoint``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {ann.CHECKPOINT: checkpoint}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "containers": [_container("trainer", gpus)],
                },
            },
        },
    }


@pytest.fixture
def cluster(plane: Plane) -> Iterator[Cluster]:
    c = Cluster(plane)
    c.namespace("serving")
    c.namespace("ml")
    yield c
    # leave an empty cluster: the workloads first (else Karpenter launches nodes for their pending
    # pods), then every NodeClaim (Karpenter drains and deletes its node)
    for ns in ("serving", "ml"):
        c.core.delete_namespace(ns)
    plane.wait_for("the scene's namespaces gone", lambda: not {"serving", "ml"} & c.namespaces(), timeout=120)
    for claim in c.nodeclaims():
        c.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
    plane.wait_for("the scene's NodeClaims and nodes gone", lambda: not c.nodeclaims() and not c.nodes(), timeout=120)


def _on_nodes(c: Cluster, namespace: str, selector: str, count: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in c.pods(namespace, selector) if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count and all(running_and_ready(p) for p in pods) else None

    return c.plane.wait_for(f"{count} {namespace} pods {selector} Running and Ready", ready, timeout=180)


def _requests(plane: Plane, user: str) -> list[dict[str, Any]]:
    return [e for e in plane.audit() if e["user"]["username"] == user]


def test_spot_warning_on_a_node_real_karpenter_launched(
    plane: Plane, aws: AwsWorld, cluster: Cluster, tmp_path: Path
) -> None:
    c = cluster
    # Given inference replicas behind a PDB: real Karpenter launches a GPU node for them, KWOK
    # registers it Ready and kube-scheduler binds them to it
    deployment, pdb = inference(INFERENCE_REPLICAS)
    c.apps.create_namespaced_deployment("serving", deployment)
    c.policy.create_namespaced_pod_disruption_budget("serving", pdb)
    serving = _on_nodes(c, "serving", "app=inference", INFERENCE_REPLICAS)
    node_name = serving[0]["spec"]["nodeName"]
    assert {p["spec"]["nodeName"] for p in serving} == {node_name}, dump(serving)

    # (Karpenter removes the node's unregistered taint before it writes the NodeClaim's nodeName:
    # the pods can be running a moment before the claim names their node)
    def named() -> list[dict[str, Any]] | None:
        claims = c.nodeclaims()
        return claims if claims and all(cl.get("status", {}).get("nodeName") for cl in claims) else None

    claims = plane.wait_for(f"the NodeClaims for {node_name} naming their node", named)
    assert [cl["status"]["nodeName"] for cl in claims] == [node_name], dump(claims)
    first_claim = claims[0]["metadata"]["name"]
    # and two training Jobs that checkpoint through pods/exec (KWOK runs the command here): one
    # by a command (its exit 0 is the acknowledgement), one by SIGUSR1 (it acknowledges on its
    # pod); they fit beside the replicas, so kube-scheduler binds them to the same node and
    # Karpenter launches nothing
    marker = plane.exec_dir / "checkpoints.log"
    c.batch.create_namespaced_job("ml", trainer("trainer", f"exec:sh -c 'date -u +%s.%N >> {marker}'", 4))
    c.batch.create_namespaced_job("ml", trainer("trainer-signal", "signal:SIGUSR1", 2))
    (train_pod,) = _on_nodes(c, "ml", "app=trainer", 1)
    (signal_pod,) = _on_nodes(c, "ml", "app=trainer-signal", 1)
    assert train_pod["spec"]["nodeName"] == signal_pod["spec"]["nodeName"] == node_name
    assert [cl["metadata"]["name"] for cl in c.nodeclaims()] == [first_claim]
    # and the instance behind the node in EC2 (moto)
    node = c.node(node_name)
    instance_id = aws.instance_for_node(node)

    # When gpuwarden is invoked on EC2's Spot warning for that instance
    with SignalAcknowledger(plane, "ml", "app=trainer-signal") as trainer_side:
        completed = invoke(plane, aws, spot_warning(instance_id), tmp_path)
    (plane.artifacts / "spot-scene.invoke.stdout").write_text(completed.stdout)
    (plane.artifacts / "spot-scene.invoke.stderr").write_text(completed.stderr)

    # Then it is handled: cordon first, the checkpoint asked before any eviction, the drain completed
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout)
    assert result["outcome"] == "handled", dump(result)
    assert result["node"] == node_name
    actions = [a["type"] for a in result["actions"]]
    assert actions[0] == "cordon", actions
    # the drain's last round, then the replacement's hold taken back once the pods run there
    assert set(actions[actions.index("drain-complete") + 1 :]) <= {"hold-released"}, actions
    assert actions.index("checkpoint-requested") < actions.index("evict"), actions

    # and the node is cordoned, tainted and annotated on the real API server
    node = c.node(node_name)
    assert node["spec"].get("unschedulable") is True
    assert {"key": ann.TAINT_KEY, "value": "spot-interruption", "effect": "NoSchedule"} in [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in node["spec"].get("taints", [])
    ], dump(node["spec"])
    assert node["metadata"]["annotations"].get(ann.EVENT_ID) == result["event_id"], dump(node["metadata"])

    # and each trainer was asked once through the API server's pods/exec and answered before its
    # eviction: the command ran here once; the signal reached the "kubelet" once and the trainer's
    # acknowledgement was on its pod before gpuwarden evicted it
    assert len(marker.read_text().split()) == 1
    assert [line.split(" ", 1)[1] for line in plane.signals.read_text().splitlines()] == ["-s USR1 1"]
    train_name, signal_name = train_pod["metadata"]["name"], signal_pod["metadata"]["name"]
    assert trainer_side.acknowledged == [signal_name]
    assert sorted(result["drain"]["checkpointed"]) == sorted([f"ml/{train_name}", f"ml/{signal_name}"])
    ours = _requests(plane, GPUWARDEN_USER)

    def at(subresource: str, name: str, code: int) -> list[Any]:
        return [
            rfc3339(e["stageTimestamp"])
            for e in ours
            if e["objectRef"].get("subresource") == subresource
            and e["objectRef"].get("name") == name
            and e.get("responseStatus", {}).get("code") == code
        ]

    exec_events = [e for e in ours if e["objectRef"].get("subresource") == "exec"]
    execs = {e["objectRef"]["name"]: rfc3339(e["stageTimestamp"]) for e in exec_events}  # the stream closed
    asked = {e["objectRef"]["name"]: rfc3339(e["requestReceivedTimestamp"]) for e in exec_events}
    assert sorted(execs) == sorted([train_name, signal_name]), dump(execs)
    for name in (train_name, signal_name):
        (evicted_at,) = at("eviction", name, 201)
        assert execs[name] < evicted_at, name
    acks = [
        rfc3339(e["stageTimestamp"])
        for e in plane.audit()
        if e["user"]["username"] == "kubernetes-admin"
        and e["verb"] == "patch"
        and e["objectRef"].get("name") == signal_name
        and not e["objectRef"].get("subresource")
    ]
    assert len(acks) == 1
    assert asked[signal_name] < acks[0] < at("eviction", signal_name, 201)[0]

    # and the PDB held: no pod was deleted, every serving pod left through the eviction API once
    assert not [e for e in ours if e["verb"] == "delete" and e["objectRef"].get("resource") == "pods"]
    for pod in serving:
        assert len(at("eviction", pod["metadata"]["name"], 201)) == 1, pod["metadata"]["name"]

    # and gpuwarden's NodeClaim was launched by real Karpenter and became a Ready node
    replacement = node["metadata"]["annotations"].get(ann.REPLACEMENT, "")
    assert replacement.startswith("nodeclaim/"), dump(node["metadata"])
    claim_name = replacement.removeprefix("nodeclaim/")

    def claim_ready() -> dict[str, Any] | None:
        claim: dict[str, Any] = c.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim_name)
        ok = all(condition(claim, t) == "True" for t in ("Launched", "Registered", "Initialized", "Ready"))
        return claim if ok else None

    claim = plane.wait_for(
        f"NodeClaim {claim_name} Launched, Registered, Initialized and Ready", claim_ready, timeout=120
    )
    (plane.artifacts / "spot-scene.nodeclaim.json").write_text(dump_full(claim))
    new_node = c.node(claim["status"]["nodeName"])
    assert condition(new_node, "Ready") == "True"
    assert new_node["metadata"]["labels"].get("karpenter.sh/nodepool") == NODEPOOL

    # and the displaced pods run there: Karpenter's provisioner launched no second node for them
    moving = (
        ("serving", "app=inference", INFERENCE_REPLICAS),
        ("ml", "app=trainer", 1),
        ("ml", "app=trainer-signal", 1),
    )
    for namespace, selector, count in moving:
        moved = _on_nodes(c, namespace, selector, count)
        assert {p["spec"]["nodeName"] for p in moved} == {new_node["metadata"]["name"]}, dump(moved)
    assert sorted(cl["metadata"]["name"] for cl in c.nodeclaims()) == sorted([first_claim, claim_name]), dump(
        c.nodeclaims()
    )

    # and Karpenter does not call gpuwarden's NodeClaim drifted
    claim = c.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim_name)
    assert condition(claim, "Drifted") != "True", dump(claim["status"])
