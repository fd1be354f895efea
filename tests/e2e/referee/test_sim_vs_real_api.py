"""The API answers gpuwarden relies on, asked of the simulator (`sim/`) and of the real API server
with the same calls through the official client, and compared: a change to `sim/` that drifts from
the real API server fails here (docs/realplane.md, "Sim against real").

On each side: a node, three pods bound to it (two behind a PDB, one alone) that its "kubelet"
makes Running and Ready (KWOK on the real plane; the test itself on the simulator, which has no
kubelet), and one pod no node can take. Each probe returns what the client saw, with what differs
by construction (uids, resourceVersions, times, the server's address) left out.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.stream import stream

from realplane.plane.harness import KWOK_NODE_ANNOTATION, Plane
from tests.e2e.world import running_and_ready

pytestmark = pytest.mark.timeout(300)

NS = "compare"
NODE = "compare-node"
PODS = ("web-0", "web-1", "solo", "grace")
IMAGE = "registry.local/app:1"
NOWHERE = {"compare.gpuwarden.io/nowhere": "true"}
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Side:
    name: str
    api: Any  # the official client (plain manifests in, sanitized dicts out)
    core: Any
    policy: Any


def _node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {"kubernetes.io/hostname": NODE, "tier": "compare"},
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        },
    }


def _pod(name: str, labels: dict[str, str], node: str | None = NODE) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": IMAGE}],
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = NOWHERE
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def _labels(name: str) -> dict[str, str]:
    return {"app": "web", "tier": "front"} if name.startswith("web") else {"app": name, "tier": "back"}


def _populate(side: Side, kubelet: Callable[[], None], wait: Callable[[str, Callable[[], Any]], Any]) -> None:
    side.core.create_namespace({"metadata": {"name": NS}})
    if side.name == "real":  # its ServiceAccount admission waits for the namespace's default account
        wait("ServiceAccount default", lambda: side.core.list_namespaced_service_account(NS).items)
    side.core.create_node(_node())
    for name in PODS:
        side.core.create_namespaced_pod(NS, _pod(name, _labels(name)))
    side.core.create_namespaced_pod(NS, _pod("lonely", {"app": "lonely"}, node=None))
    kubelet()

    def ready() -> bool:
        pods = [side.api.sanitize_for_serialization(p) for p in side.core.list_namespaced_pod(NS).items]
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return len(bound) == len(PODS) and all(running_and_ready(p) for p in bound)

    wait(f"{side.name}: pods Running and Ready", ready)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }
    side.policy.create_namespaced_pod_disruption_budget(NS, pdb)

    def computed() -> bool:
        found = side.policy.read_namespaced_pod_disruption_budget("web", NS)
        status = found.status
        return bool(status and status.observed_generation == found.metadata.generation and status.current_healthy == 2)

    wait(f"{side.name}: the PDB computed", computed)


def _gone(side: Side) -> bool:
    return NS not in {n.metadata.name for n in side.core.list_namespace().items}


@pytest.fixture(scope="module")
def real(plane: Plane) -> Iterator[Side]:
    api = plane.api_client()
    side = Side("real", api, client.CoreV1Api(api), client.PolicyV1Api(api))
    _populate(side, lambda: None, lambda what, check: plane.wait_for(what, check, timeout=120))
    yield side
    side.core.delete_namespace(NS)
    side.core.delete_node(NODE)
    plane.wait_for("the compare namespace gone", partial(_gone, side), 120)


@pytest.fixture(scope="module")
def sim(plane: Plane) -> Iterator[Side]:
    from sim.apiserver.core import KubeSim
    from sim.apiserver.exec_ws import ExecRecord, ExecResult
    from sim.builders import running_status

    def local_exec(record: ExecRecord) -> ExecResult:
        """As KWOK's ClusterExec: the command runs here, its output and exit code go back."""
        done = subprocess.run(record.command, capture_output=True, text=True, check=False, timeout=30)
        return ExecResult(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)

    with KubeSim() as kube:
        kube.exec_handler = local_exec
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kube.kubeconfig_path), client_configuration=configuration)  # type: ignore[no-untyped-call]
        api = client.ApiClient(configuration)
        side = Side("sim", api, client.CoreV1Api(api), client.PolicyV1Api(api))

        def kubelet() -> None:  # the simulator has none: the node Ready, its pods Running and Ready
            node = kube.get("Node", NODE)
            assert node is not None
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is ready"}
            address = {"type": "InternalIP", "address": "127.0.0.1"}
            kube.patch_direct("Node", NODE, {"status": {"conditions": [ready], "addresses": [address]}})
            for name in PODS:
                pod = kube.get("Pod", name, NS)
                assert pod is not None
                status = running_status(kube.get("Node", NODE), name, pod["spec"]["containers"])
                kube.patch_direct("Pod", name, {"status": status}, NS)

        def wait(what: str, check: Callable[[], Any]) -> Any:
            return plane.wait_for(what, check, timeout=30)

        _populate(side, kubelet, wait)
        yield side
        api.close()  # type: ignore[no-untyped-call]


# ----------------------------------------------------------------------------- what the client saw


def _failure(call: Callable[[], Any]) -> dict[str, Any]:
    """The Status of a refused call: code, reason, message, causes (or the answer's kind if it passed)."""
    try:
        answer = call()
    except client.ApiException as err:
        body = json.loads(err.body or "{}")
        details = body.get("details") or {}
        return {
            "code": err.status,
            "reason": body.get("reason"),
            "message": _UID.sub("<uid>", str(body.get("message"))),
            "details": {k: v for k, v in details.items() if k != "uid"},
        }
    return {"code": 200, "kind": getattr(answer, "kind", type(answer).__name__)}


def _eviction(name: str, **options: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NS},
        "deleteOptions": options,
    }


def probe_pdb_refusal(side: Side) -> Any:
    """An eviction the PDB refuses: 429 with the DisruptionBudget cause gpuwarden classifies by."""
    return _failure(lambda: side.core.create_namespaced_pod_eviction("web-0", NS, _eviction("web-0")))


def probe_eviction_uid_precondition(side: Side) -> Any:
    """An eviction naming another pod's UID (a pod recreated under the same name): refused, pod kept."""
    wrong = _eviction("solo", preconditions={"uid": "00000000-0000-0000-0000-000000000000"})
    refused = _failure(lambda: side.core.create_namespaced_pod_eviction("solo", NS, wrong))
    kept = side.core.read_namespaced_pod("solo", NS).metadata.deletion_timestamp is None
    return {"refused": refused, "kept": kept}


def probe_taint_patches(side: Side) -> Any:
    """A node's taints are an atomic list (`+listType=atomic`): a strategic merge patch replaces the
    whole list (it does not merge by key), so gpuwarden writes the full list by JSON merge patch,
    resourceVersion-checked (services/engine/writes.py)."""
    seen = []
    for patch, kind in (
        ({"spec": {"taints": [{"key": "gpuwarden.io/a", "value": "1", "effect": "NoSchedule"}]}}, "strategic"),
        ({"spec": {"taints": [{"key": "gpuwarden.io/b", "effect": "NoSchedule"}]}}, "strategic"),
        (
            {
                "spec": {
                    "taints": [
                        {"key": "gpuwarden.io/b", "effect": "NoSchedule"},
                        {"key": "gpuwarden.io/a", "value": "2", "effect": "NoSchedule"},
                    ]
                }
            },
            "merge",
        ),
        ({"spec": {"taints": None}}, "merge"),
    ):
        content = f"application/{kind}-merge-patch+json" if kind == "strategic" else "application/merge-patch+json"
        node = side.api.sanitize_for_serialization(side.core.patch_node(NODE, patch, _content_type=content))
        taints = [t for t in node["spec"].get("taints") or [] if t["key"].startswith("gpuwarden.io/")]
        seen.append([{k: t.get(k) for k in ("key", "value", "effect")} for t in taints])
    return seen


def probe_merge_patch_annotations(side: Side) -> Any:
    """Annotations by JSON merge patch: added, one removed by null, a missing one removed (no error)."""
    seen = []
    for notes in ({"x": "1", "y": "2"}, {"y": None}, {"absent": None}):
        body = {"metadata": {"annotations": notes}}
        pod = side.core.patch_namespaced_pod("solo", NS, body, _content_type="application/merge-patch+json")
        seen.append({k: v for k, v in (pod.metadata.annotations or {}).items() if k in ("x", "y", "absent")})
    return seen


def probe_resource_version_preconditions(side: Side) -> Any:
    """A write naming a stale resourceVersion: 409 Conflict, for a patch and for a replace."""
    stale = side.core.read_node(NODE)
    side.core.patch_node(NODE, {"metadata": {"labels": {"touched": "1"}}})
    patch = {"metadata": {"resourceVersion": stale.metadata.resource_version, "labels": {"touched": "2"}}}
    patched = _failure(lambda: side.core.patch_node(NODE, patch))
    replaced = _failure(lambda: side.core.replace_node(NODE, stale))
    return {"patch": patched, "replace": replaced, "label": side.core.read_node(NODE).metadata.labels.get("touched")}


def probe_field_selectors(side: Side) -> Any:
    def names(selector: str) -> list[str]:
        return sorted(p.metadata.name for p in side.core.list_namespaced_pod(NS, field_selector=selector).items)

    return {
        "on the node": names(f"spec.nodeName={NODE}"),
        "unbound": names("spec.nodeName="),
        "not on the node": names(f"spec.nodeName!={NODE}"),
        "by name and node": names(f"metadata.name=solo,spec.nodeName={NODE}"),
        "running": names("status.phase=Running"),
    }


def probe_label_selectors(side: Side) -> Any:
    def names(selector: str) -> list[str]:
        return sorted(p.metadata.name for p in side.core.list_namespaced_pod(NS, label_selector=selector).items)

    return {
        selector: names(selector)
        for selector in ("app=web", "app in (web,solo),tier!=front", "!tier", "tier", "app notin (web)", "app,tier")
    }


def probe_exec_websocket(side: Side) -> Any:
    """pods/exec over WebSocket: stdout, stderr and the status channel, for a failing and a passing command."""
    seen = []
    for script in ("echo out; echo err >&2; exit 3", "echo fine"):
        resp = stream(
            side.core.connect_get_namespaced_pod_exec,
            "solo",
            NS,
            command=["sh", "-c", script],
            container="main",
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
        )
        out, err = [], []
        while resp.is_open():
            resp.update(timeout=5)
            if resp.peek_stdout():
                out.append(resp.read_stdout())
            if resp.peek_stderr():
                err.append(resp.read_stderr())
        status = json.loads(resp.read_channel(3) or "{}")
        resp.close()
        if status.get("status") != "Success":
            # How a non-zero exit comes back is the kubelet's: a kubelet answers NonZeroExitCode with
            # an ExitCode cause (the simulator does too); KWOK's exec answers InternalError 500 with
            # "exit status 3" in the message, which gpuwarden reads as no exit code, i.e. not
            # acknowledged (docs/realplane.md, "What the real plane cannot show")
            status = {"status": status.get("status")}
        seen.append({"stdout": "".join(out), "stderr": "".join(err), "status": status})
    return seen


def probe_delete_grace(side: Side) -> Any:
    """A delete's grace as the API server clamps it: a negative one on a bound pod becomes 1 s; an
    unbound pod goes at once whatever the grace."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": -5}
    deleted = side.api.sanitize_for_serialization(side.core.delete_namespaced_pod("grace", NS, body=body))
    lonely = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30}
    side.core.delete_namespaced_pod("lonely", NS, body=lonely)
    gone = _failure(lambda: side.core.read_namespaced_pod("lonely", NS))
    return {"grace": deleted["metadata"].get("deletionGracePeriodSeconds"), "unbound": gone}


def probe_gzip(side: Side) -> Any:
    """An answer is gzipped when the client accepts gzip and the answer is longer than 128 KiB;
    a shorter one, or one to a client that does not ask, comes as it is (docs/architecture.md, "Lists")."""
    seen = {}
    for name, size in (("small", 4 * 1024), ("big", 160 * 1024)):
        body = {"metadata": {"name": f"gz-{name}"}, "data": {"blob": "gpu" * (size // 3)}}
        side.core.create_namespaced_config_map(NS, body)
        for accept in ("gzip", "identity"):
            answer = side.core.read_namespaced_config_map(
                f"gz-{name}", NS, _preload_content=False, _headers={"Accept-Encoding": accept}
            )
            blob = json.loads(answer.read())["data"]["blob"]
            seen[f"{name}, accepts {accept}"] = {"encoding": answer.headers.get("Content-Encoding"), "blob": len(blob)}
        side.core.delete_namespaced_config_map(f"gz-{name}", NS)
    return seen


PROBES = [
    probe_pdb_refusal,
    probe_eviction_uid_precondition,
    probe_taint_patches,
    probe_merge_patch_annotations,
    probe_resource_version_preconditions,
    probe_field_selectors,
    probe_label_selectors,
    probe_exec_websocket,
    probe_delete_grace,
    probe_gzip,
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.__name__.removeprefix("probe_") for p in PROBES])
def test_the_simulator_answers_as_the_real_api_server(real: Side, sim: Side, probe: Callable[[Side], Any]) -> None:
    expected, got = probe(real), probe(sim)
    shown = f"real: {json.dumps(expected, indent=1)}\nsim:  {json.dumps(got, indent=1)}"
    assert got == expected, f"sim/ differs from the real API server:\n{shown}"
