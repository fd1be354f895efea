"""KWOK on the plane: the "kubelet" of every node annotated ``kwok.x-k8s.io/node=fake`` (node
heartbeat by lease; pods ready, completed, deleted (at once, or as a kubelet: `KUBELET_DELETE`);
``pods/exec`` run as a local command)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from realplane.build import pins
from realplane.plane.certs import Pki

#: The annotation Karpenter's KWOK provider puts on every node it creates; KWOK manages those.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}=fake"

# `kill` for pods/exec: KWOK runs an exec'd command on this machine, so the `kill -s USR1 1` of a
# `signal:` checkpoint would signal this machine's PID 1. This one, first on KWOK's PATH, records
# the signal (one line per call in $REALPLANE_SIGNALS) and signals nothing.
_KILL_SHIM = """#!/bin/sh
printf '%s %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" "$*" >> "${REALPLANE_SIGNALS:?}"
"""


def prepare(shims: Path, exec_dir: Path) -> None:
    """The folder of shims put first on KWOK's PATH (`kill`), and the exec'd commands' folder."""
    shims.mkdir()
    (shims / "kill").write_text(_KILL_SHIM)
    (shims / "kill").chmod(0o755)
    exec_dir.mkdir()


#: A deleted pod ends as a kubelet ends it: terminal phase at the end of its grace, then gone once its
#: finalizers are (stages/kubelet-delete.yaml), in place of KWOK's fast pod-delete.
KUBELET_DELETE = Path(__file__).with_name("stages") / "kubelet-delete.yaml"

#: A node's status written every 10-20 s, as a kubelet's (``nodeStatusUpdateFrequency`` 10 s), in
#: place of the build's 10-20 min report: each write is a Node update event. Karpenter v1.0's KWOK
#: provider makes the Node before its NodeClaim names it, and its registration then waits for the
#: Node's next event (docs/realplane.md, "Karpenter versions: a second pin").
FREQUENT_NODE_STATUS = Path(__file__).with_name("stages") / "node-status-frequent.yaml"


def config(
    workdir: Path,
    exec_dir: Path,
    signals: Path,
    *,
    complete_jobs: bool,
    kubelet_deletes: bool = False,
    frequent_node_status: bool = False,
) -> Path:
    """KWOK's stages (the build's, without pod-complete unless ``complete_jobs``; with
    ``kubelet_deletes``, `KUBELET_DELETE` instead of the fast pod-delete; with
    ``frequent_node_status``, `FREQUENT_NODE_STATUS` instead of the lease-era heartbeat) and the
    local exec, whose `kill`s are recorded in ``signals``."""
    stages = sorted((pins.share_dir() / "kwok-stages").glob("*.yaml"))
    if not complete_jobs:
        stages = [p for p in stages if p.name != "pod-complete.yaml"]
    if kubelet_deletes:
        stages = [p for p in stages if p.name != "pod-delete.yaml"] + [KUBELET_DELETE]
    if frequent_node_status:
        stages = [p for p in stages if p.name != "node-heartbeat-with-lease.yaml"] + [FREQUENT_NODE_STATUS]
    cluster_exec: dict[str, Any] = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterExec",
        "metadata": {"name": "local"},
        "spec": {
            "execs": [
                {
                    "local": {
                        "workDir": str(exec_dir),
                        "envs": [{"name": "REALPLANE_SIGNALS", "value": str(signals)}],
                    }
                }
            ]
        },
    }
    docs = [p.read_text() for p in stages] + [yaml.safe_dump(cluster_exec)]
    path = workdir / "kwok.yaml"
    path.write_text("\n---\n".join(docs))
    return path


def argv(kubeconfig: Path, config: Path, port: int, pki: Pki) -> list[str]:
    return [
        "kwok",
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={pki.kubelet_cert}",
        f"--tls-private-key-file={pki.kubelet_key}",
        "--node-lease-duration-seconds=40",
    ]


def environment(shims: Path) -> dict[str, str]:
    """An exec'd command is looked up on KWOK's own PATH: the shims come first."""
    return {"PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
