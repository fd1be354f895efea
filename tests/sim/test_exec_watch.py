"""pods/exec over WebSocket with the official client, and watch."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from sim import ExecRecord, ExecResult, KubeSim
from sim import builders as b


@pytest.fixture
def trainer(sim: KubeSim, node: dict[str, Any]) -> dict[str, Any]:
    return sim.create(b.training_pod("train-0-w", node))


def _exec(core: Any, command: list[str], container: str = "trainer", preload: bool = False) -> Any:
    return stream(
        core.connect_get_namespaced_pod_exec,
        "train-0-w",
        "ml",
        command=command,
        container=container,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=preload,
    )


@pytest.mark.parametrize("exit_code", [0, 3])
def test_exec_returns_exit_code_and_output(sim: KubeSim, core: Any, trainer: dict[str, Any], exit_code: int) -> None:
    def handler(rec: ExecRecord) -> ExecResult:
        return ExecResult(exit_code=exit_code, stdout="out:" + " ".join(rec.command), stderr="err")

    sim.exec_handler = handler
    ws = _exec(core, ["kill", "-s", "SIGUSR1", "1"])
    ws.run_forever(timeout=5)
    assert ws.returncode == exit_code
    assert ws.read_stdout() == "out:kill -s SIGUSR1 1"
    assert ws.read_stderr() == "err"
    [rec] = sim.exec_log
    assert (rec.namespace, rec.pod, rec.container, rec.command) == ("ml", "train-0-w", "trainer", rec.command)
    assert rec.command == ["kill", "-s", "SIGUSR1", "1"]
    assert rec.protocol == "v5.channel.k8s.io"


def test_exec_preloaded_output_and_default_handler(core: Any, trainer: dict[str, Any], sim: KubeSim) -> None:
    assert _exec(core, ["true"], preload=True) == ""
    assert sim.exec_log[0].command == ["true"]


def test_exec_errors_before_upgrade(core: Any, trainer: dict[str, Any], sim: KubeSim) -> None:
    direct: Any = client.CoreV1Api(sim.api_client())
    with pytest.raises(ApiException) as err:  # a plain GET (no upgrade) reaches the same checks
        direct.connect_get_namespaced_pod_exec("train-0-w", "ml", command=["true"], container="nope")
    assert err.value.status == 400
    assert "container nope is not valid for pod train-0-w" in (err.value.body or "")
    with pytest.raises(ApiException) as err:
        direct.connect_get_namespaced_pod_exec("ghost", "ml", command=["true"])
    assert err.value.status == 404
    with pytest.raises(ApiException):  # over the websocket too: the handshake fails
        _exec(core, ["true"], container="nope")
    assert sim.exec_log == []


def test_watch_streams_changes(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    seen: list[tuple[str, str]] = []
    w: Any = watch.Watch()  # type: ignore[no-untyped-call]

    def consume() -> None:
        for event in w.stream(core.list_node, timeout_seconds=5):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    assert sim.wait_until(lambda: ("ADDED", "gpu-a") in seen, timeout=5)
    core.patch_node("gpu-a", {"spec": {"unschedulable": True}})
    core.delete_node("gpu-a")
    t.join(timeout=10)
    assert seen == [("ADDED", "gpu-a"), ("MODIFIED", "gpu-a"), ("DELETED", "gpu-a")]


def test_watch_from_resource_version_replays_missed_events(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    rv = core.list_node().metadata.resource_version
    core.patch_node("gpu-a", {"metadata": {"labels": {"x": "1"}}})
    w: Any = watch.Watch()  # type: ignore[no-untyped-call]
    events = []
    for event in w.stream(core.list_node, resource_version=rv, timeout_seconds=1):
        events.append(event["type"])
        w.stop()
    assert events == ["MODIFIED"]


def test_a_workloads_acknowledgement_still_waiting_when_the_cluster_stops_is_never_written() -> None:
    # Given a cluster whose workloads acknowledge a signal 0.3 s after it arrives
    from sim.actors.workloads import DONE, Workloads

    sim = KubeSim(clock_speed=1.0).start()
    workloads = Workloads(sim, delay=0.3).install()
    sim.create(b.training_pod("train-0-w", sim.create(b.gpu_node("ip-10-0-0-9", "i-0900000000000000a"))))
    record = ExecRecord("ml", "train-0-w", "trainer", ["kill", "-s", "USR1", "1"], sim.clock.now())
    assert workloads.sim.exec_handler(record).exit_code == 0
    # When the cluster stops before then
    sim.stop()
    threading.Event().wait(0.6)
    # Then the acknowledgement is dropped: nothing is written into the stopped cluster
    assert workloads.acked == []
    pod = sim.get("Pod", "train-0-w", "ml")
    assert pod is not None
    assert DONE not in (pod["metadata"].get("annotations") or {})
