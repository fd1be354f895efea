"""gpuwarden's CLI as a user runs it, for the tests that drive it: the installed console script in a
subprocess, KUBECONFIG pointing at the simulator and AWS_ENDPOINT_URL at a moto server. The
subprocess keeps real time, so the simulator runs at speed 1 and the pods' grace periods are 1 s."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.clock import rfc3339
from tests.integration.conftest import load_event
from tests.integration.scenarios import Scenario, spot_node

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    finally:
        server.stop()


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(clock_speed=1.0) as running:
        Workloads(running, delay=0.2).install()
        yield running


def invoke_env(sim: KubeSim, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "DRY_RUN"))}
    return env | {
        "KUBECONFIG": str(sim.kubeconfig_path),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-west-2",
        "GPUWARDEN_CLUSTER": "ml-prod",
        "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenTest",
    }


def invoke(sim: KubeSim, endpoint: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUWARDEN), "invoke", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=invoke_env(sim, endpoint),
        timeout=60,
        check=False,
    )


def cluster(sim: KubeSim) -> Scenario:
    return spot_node(sim, modes=("annotate",), inference=1, pdb_min_available=None, grace=1)


def spot_now(sim: KubeSim) -> dict[str, Any]:
    return load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))


def run(
    sim: KubeSim, endpoint: str, args: list[str], extra: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUWARDEN), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=invoke_env(sim, endpoint) | extra,
        timeout=60,
        check=False,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: ml-prod\n  cluster:\n"
        f"    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\n"
        "contexts:\n- name: c\n  context: {cluster: ml-prod, user: u}\ncurrent-context: c\n"
        "users:\n- name: u\n  user: {token: t}\n"
    )
    return path
