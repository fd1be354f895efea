"""Every failure is the contract's JSON: `gpuwarden invoke` as a new user runs it, in a subprocess,
with no cluster, no AWS credentials, an AWS endpoint that refuses connections, or a KUBECONFIG whose
API server refuses them. Never a traceback; an event ignored at parse time touches no network."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.notice import Kind
from tests.integration.cli_subprocess import GPUWARDEN, closed_port, kubeconfig

EVENTS = Path(__file__).resolve().parents[2] / "events"
KINDS = {k.value for k in Kind}
NODE = "ip-10-0-1-23.us-west-2.compute.internal"
#: a warning of each kind, and the kind the JSON must report
WARNINGS = [
    ("spot-interruption.json", "spot-interruption"),
    ("spot-interruption-empty-time.json", "spot-interruption"),
    ("capacity-reservation-interruption.json", "capacity-reservation-interruption"),
    ("capacity-block-expiration-warning.json", "capacity-block-expiry"),
    ("capacity-block-delivered.json", "capacity-block-plan"),
    ("health-scheduled-change-nth.json", "scheduled-maintenance"),
    ("cloudwatch-alarm-state-change-gpu-idle.json", "gpu-idle"),
    ("rebalance-recommendation.json", "rebalance"),
    ("instance-state-change-stopping.json", "instance-stopping"),
]


class Listener:
    """A localhost TCP port that counts connections (and closes them at once)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    running = Listener()
    try:
        yield running
    finally:
        running.close()


def invoke(sample: str, tmp_path: Path, **env: str) -> tuple[int, dict[str, Any], str]:
    """A user's shell: no AWS_* or KUBECONFIG of ours, no credentials files, no instance metadata."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    base |= {
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "GPUWARDEN_CLUSTER": "ml-prod",
    }
    completed = subprocess.run(
        [str(GPUWARDEN), "invoke", str(EVENTS / sample)],
        capture_output=True,
        text=True,
        env=base | env,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in completed.stderr, completed.stderr[-2000:]
    return completed.returncode, json.loads(completed.stdout), completed.stderr


def assert_failed(code: int, result: dict[str, Any], kind: str, *words: str) -> None:
    assert code == 1, result
    assert result["outcome"] == "failed"
    assert result["kind"] == kind
    assert "node" in result
    assert result["actions"] == []
    for word in words:
        assert word in result["reason"], result["reason"]


@pytest.mark.parametrize(("sample", "kind"), WARNINGS)
def test_no_cluster_and_no_credentials_is_a_failed_json_result_naming_both(
    sample: str, kind: str, tmp_path: Path
) -> None:
    # Given a laptop with no KUBECONFIG and no AWS credentials (a region, as the docs ask)
    # When a sample is invoked
    code, result, _ = invoke(sample, tmp_path, AWS_REGION="us-west-2")
    # Then: the failed JSON, exit 1, the contract kind, node present, what failed and where
    assert_failed(code, result, kind, "no AWS credentials", "EKS DescribeCluster ml-prod")
    assert result["node"] in (None, NODE)  # only the GPU-idle alarm names its node


def test_no_cluster_and_no_region_says_there_is_no_cluster(tmp_path: Path) -> None:
    code, result, _ = invoke("spot-interruption.json", tmp_path)
    assert_failed(code, result, "spot-interruption", "no cluster reachable", "KUBECONFIG is not set")


def test_an_aws_endpoint_that_refuses_connections_is_a_failed_json_result(tmp_path: Path) -> None:
    # Given credentials, but AWS_ENDPOINT_URL at a closed localhost port
    endpoint = f"http://127.0.0.1:{closed_port()}"
    code, result, _ = invoke(
        "capacity-reservation-interruption.json",
        tmp_path,
        AWS_REGION="us-west-2",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_ENDPOINT_URL=endpoint,
    )
    assert_failed(code, result, "capacity-reservation-interruption", "AWS endpoint down", endpoint)


@pytest.mark.parametrize(("sample", "kind"), WARNINGS[:5])
def test_a_kubeconfig_whose_api_server_refuses_connections_is_a_failed_json_result(
    sample: str, kind: str, tmp_path: Path
) -> None:
    # Given KUBECONFIG pointing at a closed localhost port
    port = closed_port()
    code, result, _ = invoke(sample, tmp_path, KUBECONFIG=str(kubeconfig(tmp_path, port)))
    # Then the failed JSON names the API server
    assert_failed(code, result, kind, "no cluster reachable", f"127.0.0.1:{port}")


@pytest.mark.parametrize(
    ("sample", "kind"),
    [
        ("cloudwatch-alarm-state-change-cpu.json", "gpu-idle"),
        ("cloudwatch-alarm-state-change-metric-math.json", "gpu-idle"),
        ("cloudwatch-alarm-state-change-ok.json", "gpu-idle"),
    ],
)
def test_an_event_ignored_at_parse_time_touches_no_network(
    sample: str, kind: str, tmp_path: Path, listener: Listener
) -> None:
    # Given a cluster API and an AWS endpoint that count every connection
    env = {
        "KUBECONFIG": str(kubeconfig(tmp_path, listener.port)),
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{listener.port}",
        "AWS_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    # When an event no deployed rule takes is invoked
    code, result, _ = invoke(sample, tmp_path, **env)
    # Then it is ignored with the reason, as its contract kind, and nothing was connected to
    assert code == 0
    assert (result["outcome"], result["kind"], result["node"]) == ("ignored", kind, None)
    assert result["reason"]
    assert listener.connections == 0


def test_every_sample_answers_with_a_contract_kind_and_a_node_key_with_no_cluster(tmp_path: Path) -> None:
    for path in sorted(EVENTS.glob("*.json")):
        completed = subprocess.run(
            [str(GPUWARDEN), "invoke", str(path)],
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "GPUWARDEN_"))}
            | {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
            | {"AWS_EC2_METADATA_DISABLED": "true"},
            timeout=120,
            check=False,
        )
        assert "Traceback" not in completed.stderr, (path.name, completed.stderr[-1000:])
        assert completed.returncode in (0, 1), (path.name, completed.stderr[-500:])
        result = json.loads(completed.stdout)
        assert result["kind"] in KINDS, (path.name, result)
        assert "node" in result, path.name


def test_an_api_server_that_keeps_answering_503_is_a_failed_json_result_after_the_retries(tmp_path: Path) -> None:
    # Given a cluster whose API server answers every node read with 503
    from sim import KubeSim

    with KubeSim(clock_speed=1.0) as sim:
        sim.faults.inject(status=503, method="GET", path=r"/api/v1/nodes.*")
        # When a Spot warning is invoked
        code, result, _ = invoke("spot-interruption.json", tmp_path, KUBECONFIG=str(sim.kubeconfig_path))
        writes = [r for r in sim.requests if r.method != "GET"]
    # Then the failed JSON says the API call failed after its retries, and nothing was written
    assert_failed(code, result, "spot-interruption", "Kubernetes API call failed after its retries", "503")
    assert writes == []


def test_no_kubeconfig_with_aws_settings_and_no_such_eks_cluster_says_both_and_claims_no_retries(
    tmp_path: Path,
) -> None:
    # Given AWS settings (credentials, a region, an endpoint: moto) and no KUBECONFIG, and no EKS cluster
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        code, result, _ = invoke(
            "spot-interruption.json",
            tmp_path,
            AWS_REGION="us-west-2",
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_ENDPOINT_URL=f"http://{host}:{port}",
            # a name no other test gives an EKS cluster: moto's backends are one per process, and the
            # threaded server shares them with any mock another test of this worker left behind
            GPUWARDEN_CLUSTER="ml-nowhere",
        )
    finally:
        server.stop()
    # Then the reason names both causes: no KUBECONFIG, and EKS has no such cluster (an answer, not a fault)
    assert_failed(code, result, "spot-interruption", "no cluster reachable", "KUBECONFIG is not set", "ml-nowhere")
    assert "ResourceNotFoundException" in result["reason"], result["reason"]
    assert "after its retries" not in result["reason"], result["reason"]


def test_release_of_a_node_that_is_not_there_is_not_found_and_claims_no_retries(tmp_path: Path) -> None:
    # Given a cluster without a node named "typo"
    from sim import KubeSim

    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    with KubeSim(clock_speed=1.0) as sim:
        env = base | {"KUBECONFIG": str(sim.kubeconfig_path), "GPUWARDEN_CLUSTER": "ml-prod"}
        # When `gpuwarden release --node typo` runs
        completed = subprocess.run(
            [str(GPUWARDEN), "release", "--node", "typo"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    result = json.loads(completed.stdout)
    # Then it fails with its own reason: not found, and no retries claimed
    assert completed.returncode == 1, result
    assert result["outcome"] == "failed", result
    assert result["reason"].startswith("not found in the cluster: node typo is not in cluster ml-prod"), result
    assert "after its retries" not in result["reason"], result["reason"]
