"""The Kubernetes adapter's own behaviour, against the simulator over HTTP."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpuwarden.adapters.kube import KubeClient
from gpuwarden.domain.errors import NotFound
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim import KubeSim
from sim.apiserver.core import TOKEN as SIM_TOKEN
from sim.builders import gpu_node
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import spot_node


def test_urgent_calls_skip_the_rate_limit_that_paces_the_bulk_of_a_drain(sim: KubeSim) -> None:
    # Given a client limited to 2 requests/s with a burst of 1, the burst already spent on a pod list
    sim.create(gpu_node("n1", "i-0123456789abcdef0"))
    kube = KubeClient(sim.api_client(), qps=2.0, burst=1)
    kube.list_pods_on_node("n1")
    # When it finds and cordons the node five times in a row (node reads and PATCHes)
    began = time.monotonic()
    for i in range(5):
        node = kube.get_node("n1")
        assert node is not None
        kube.patch_node("n1", {"metadata": {"annotations": {"k": str(i)}}}, node.resource_version)
    urgent = time.monotonic() - began
    # and then lists the node's pods three times (the bulk of a drain)
    began = time.monotonic()
    for _ in range(3):
        kube.list_pods_on_node("n1")
    bulk = time.monotonic() - began
    # Then the urgent calls went out at once and the pod lists were paced at 2/s
    assert urgent < 1.0
    assert bulk >= 0.9  # at least two of the three waited for a token


def test_exec_into_a_pod_that_is_gone_raises_not_found(sim: KubeSim) -> None:
    # Given no such pod
    kube = KubeClient(sim.api_client())
    # When gpuwarden tries to signal it, Then the adapter says NotFound (a typed error, not the client's)
    with pytest.raises(NotFound):
        kube.exec_in_pod("ml", "gone-worker", "trainer", ["kill", "-s", "USR1", "1"], 5.0)


def test_a_trainer_that_vanishes_between_the_request_and_the_signal_does_not_fail_the_handling(
    world: World,
) -> None:
    # Given a signal-mode trainer that disappears the moment its checkpoint is requested
    scenario = spot_node(world.sim, modes=("signal:SIGUSR1",), inference=0, pdb_min_available=None)
    namespace, name = scenario.trainers["signal"].split("/")

    def vanish(kind: str, event_type: str, obj: dict[str, Any]) -> None:
        annotations = obj["metadata"].get("annotations") or {}
        if kind == "Pod" and obj["metadata"]["name"] == name and "gpuwarden.io/checkpoint-requested" in annotations:
            world.sim.delete_direct("Pod", name, namespace, grace_seconds=0)

    world.sim.on_change(vanish)
    # When the Spot warning is handled
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    result = handle_batch(parse_notices(event), world.deps()).to_json()
    # Then the handling completes (the request or the signal found the pod gone) and the node drains
    assert result["outcome"] == "handled", result["reason"]
    assert all("NotFound" in a["result"] for a in result["actions"] if a["type"] == "signal")
    assert result["drain"]["outcome"] == "drained"
    assert world.pod(scenario.trainers["signal"]) is None


def test_a_kubeconfig_token_hook_runs_once_a_minute_not_before_every_request(
    sim: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubeconfig loader's hook re-applies every setting of the file (and reads the proxy
    environment) before each request; gpuwarden runs it at most once a minute."""
    from kubernetes.config.kube_config import KubeConfigLoader

    from gpuwarden.adapters import kubeconfig

    calls: list[float] = []
    real_set = KubeConfigLoader._set_config

    def counted(self: Any, configuration: Any) -> None:
        calls.append(now[0])
        real_set(self, configuration)  # type: ignore[no-untyped-call]

    now = [1000.0]
    monkeypatch.setattr(KubeConfigLoader, "_set_config", counted)
    monkeypatch.setattr("gpuwarden.adapters.kubeconfig.monotonic", lambda: now[0])
    api = kubeconfig.client_from_kubeconfig(str(sim.kubeconfig_path))
    kube = KubeClient(api)
    loaded = len(calls)  # the load itself applies the file once
    for _ in range(20):
        kube.list_nodes()
        now[0] += 1.0
    assert len(calls) - loaded == 1  # the first request; the next 19 s are within the minute
    now[0] += kubeconfig.KUBECONFIG_REFRESH_SECONDS
    kube.list_nodes()
    assert len(calls) - loaded == 2
    # and a request between refreshes still carries the file's token
    headers = api.param_serialize(method="GET", resource_path="/api", auth_settings=["BearerToken"])[2]
    assert headers["authorization"] == f"Bearer {SIM_TOKEN}"


def test_a_large_list_crosses_the_wire_gzipped_as_the_api_server_sends_it(sim: KubeSim) -> None:
    # Given 150 GPU nodes: one page of them is some 300 KB of JSON, past the API server's 128 KiB
    for i in range(150):
        sim.create(gpu_node(f"gpu-{i}", f"i-{i:017x}"))
    kube = KubeClient(sim.api_client())
    # When the adapter lists them
    nodes = kube.list_nodes()
    # Then every node came, and the answer crossed the wire compressed (asked for, as every request is)
    assert len(nodes) == 150
    assert kube.wire_bytes < 64 * 1024
