"""Crash and resume: SIGKILL `gpuwarden invoke` at each step boundary, deliver again, converge.

The boundary is read off the simulator as it happens (the observer sees every write in the
request's thread); the process is killed at once, then the same event runs again to the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sim import KubeSim
from tests.reliability.conftest import invoke_env, ledger_item
from tests.reliability.harness import (
    TAINT_KEY,
    Cluster,
    Observer,
    build_cluster,
    drained,
    finish,
    fresh_sim,
    snapshot,
    spot_event,
    start,
    write_event,
)

Boundary = Callable[[KubeSim, Cluster, Observer], bool]


def _cordoned(sim: KubeSim, cluster: Cluster, observer: Observer) -> bool:
    return bool(observer.taint_writes(cluster.node))


def _signalled(sim: KubeSim, cluster: Cluster, observer: Observer) -> bool:
    return any(rec.command[:2] == ["kill", "-s"] for rec in sim.exec_log)


def _mid_drain(sim: KubeSim, cluster: Cluster, observer: Observer) -> bool:
    return any(observer.removal(key) is not None for key in cluster.must_go)


def _replaced(sim: KubeSim, cluster: Cluster, observer: Observer) -> bool:
    node = sim.get("Node", cluster.node) or {}
    return str((node.get("metadata", {}).get("annotations") or {}).get("gpuwarden.io/replacement", "")).startswith(
        "nodeclaim/"
    )


BOUNDARIES: dict[str, Boundary] = {
    "after-cordon": _cordoned,
    "after-signals": _signalled,
    "mid-drain": _mid_drain,
    "after-replacement": _replaced,
}


@pytest.mark.parametrize("boundary", sorted(BOUNDARIES))
def test_killed_at_a_step_boundary_the_redelivery_converges_without_duplicates(
    boundary: str, tmp_path: Path, moto_server: str
) -> None:
    # Given a Spot node whose trainers ack after 1 s and time out after 4 s
    with fresh_sim(speed=1.0, ack_delay=1.0) as (sim, _workloads):
        cluster = build_cluster(sim, grace=2, checkpoint_timeout=4)
        observer = Observer(sim)
        before = snapshot(sim, [*cluster.elsewhere, *cluster.must_stay])
        event = spot_event(sim.clock.now(), id=f"crash-{boundary}-{uuid.uuid4()}")
        path = write_event(tmp_path, event)
        env = invoke_env(sim, moto_server)
        # When the handling process is SIGKILLed the moment it crosses the boundary
        first = start(path, env)
        crossed = sim.wait_until(lambda: BOUNDARIES[boundary](sim, cluster, observer), timeout=30, interval=0.002)
        first.kill()
        first.wait(timeout=10)
        assert crossed, boundary
        # and the event is delivered again, to the end
        rc, result, err = finish(start(path, env))
        # Then the rerun converges to the end state of an uninterrupted run, with no duplicate side effects
        assert rc == 0, err
        assert "outcome" in result, (result, err[-3000:])
        assert result["outcome"] in ("handled", "duplicate"), result
        node = sim.get("Node", cluster.node)
        assert node is not None
        annotations = node["metadata"]["annotations"]
        assert node["spec"]["unschedulable"] is True
        assert [t for t in node["spec"]["taints"] if t["key"] == TAINT_KEY] == [
            {"key": TAINT_KEY, "value": "spot-interruption", "effect": "NoSchedule"}
        ]
        assert annotations["gpuwarden.io/event-id"] == event["id"]
        assert "gpuwarden.io/drain-completed" in annotations
        claims = sim.list("NodeClaim")
        assert len(claims) == 1, [c["metadata"]["name"] for c in claims]
        assert annotations["gpuwarden.io/replacement"] == "nodeclaim/" + claims[0]["metadata"]["name"]
        assert drained(sim, cluster.must_go)
        assert snapshot(sim, list(before)) == before
        assert len(observer.taint_writes(cluster.node)) == 1
        creates = [w for w in observer.writes if w.kind == "NodeClaim" and w.event == "ADDED"]
        assert len(creates) == 1
        for key in cluster.trainers:
            asks = [
                w for w in observer.pod_writes(key) if w.method == "PATCH" and "checkpoint-requested" in str(w.body)
            ]
            assert len(asks) == 1, (key, asks)
            signals = [r for r in sim.exec_log if f"{r.namespace}/{r.pod}" == key and r.command[:2] == ["kill", "-s"]]
            assert len(signals) <= 1, (key, signals)
        item = ledger_item(moto_server, event["id"])
        assert item is not None
        assert item["outcome"] in ("handled", "duplicate")
