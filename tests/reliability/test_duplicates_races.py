"""Duplicate and concurrent deliveries across separate processes (as separate Lambda instances).

Every delivery is a `gpuwarden invoke` subprocess with KUBECONFIG pointing at the simulator
and AWS_ENDPOINT_URL at one shared moto server holding the state table.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sim import KubeSim
from sim.builders import gpu_node, nodeclaim_for
from tests import replay
from tests.reliability.conftest import invoke_env, ledger_item
from tests.reliability.harness import (
    INSTANCE,
    NODE,
    TAINT_KEY,
    Observer,
    build_cluster,
    drained,
    finish,
    fresh_sim,
    load_event,
    spot_event,
    start,
    write_event,
)


def keep_runs(tmp_path: Path, runs: list[tuple[int, dict[str, Any], str]]) -> None:
    """Every delivery's exit code, result and stderr, kept with the artifacts if the test fails (tests/replay.py)."""
    kept = [{"rc": rc, "result": result, "stderr": err} for rc, result, err in runs]
    (tmp_path / "deliveries.json").write_text(json.dumps(kept, indent=1))
    replay.note(outcomes=dict(Counter(str(result.get("outcome")) for _, result, _ in runs)))


# --------------------------------------------------------------------------- the same event N times


def deliver_many(total: int, tmp_path: Path, moto_server: str) -> None:
    with fresh_sim(speed=1.0, ack_delay=0.2) as (sim, _workloads):
        cluster = build_cluster(sim, grace=1)
        observer = Observer(sim)
        event = spot_event(sim.clock.now(), id=f"dup-{uuid.uuid4()}")
        path = write_event(tmp_path, event)
        replay.note(event_id=event["id"], deliveries=total)
        env = invoke_env(sim, moto_server)
        runs: list[tuple[int, dict[str, Any], str]] = []
        for first in range(0, total, 10):  # waves of 10 concurrent deliveries
            procs = [start(path, env) for _ in range(min(10, total - first))]
            runs += [finish(p) for p in procs]
        keep_runs(tmp_path, runs)
        assert [rc for rc, _, _ in runs] == [0] * total, [err for rc, _, err in runs if rc][:1]
        outcomes = Counter(result["outcome"] for _, result, _ in runs)
        assert outcomes == {"handled": 1, "duplicate": total - 1}, outcomes
        # exactly one taint write, one replacement, one ledger record with the duplicates counted
        assert len(observer.taint_writes(cluster.node)) == 1
        claims = sim.list("NodeClaim")
        assert len(claims) == 1, [c["metadata"]["name"] for c in claims]
        node = sim.get("Node", cluster.node)
        assert node is not None
        assert (
            node["metadata"]["annotations"]["gpuwarden.io/replacement"] == "nodeclaim/" + claims[0]["metadata"]["name"]
        )
        item = ledger_item(moto_server, event["id"])
        assert item is not None
        assert item["outcome"] == "handled"
        assert int(item["duplicates"]) == total - 1
        assert drained(sim, cluster.must_go)
        # each opted-in pod was asked once
        for key in cluster.trainers:
            asks = [
                w
                for w in observer.pod_writes(key)
                if w.method == "PATCH" and "gpuwarden.io/checkpoint-requested" in json.dumps(w.body)
            ]
            assert len(asks) == 1, (key, len(asks))


def test_same_spot_warning_delivered_twenty_times_by_separate_processes_acts_once(
    tmp_path: Path, moto_server: str
) -> None:
    deliver_many(20, tmp_path, moto_server)


@pytest.mark.long
def test_same_spot_warning_delivered_a_hundred_times_by_separate_processes_acts_once(
    tmp_path: Path, moto_server: str
) -> None:
    deliver_many(100, tmp_path, moto_server)


# --------------------------------------------------------------------------- two events, one node


def put_idle_utilization(moto_url: str) -> None:
    import boto3

    now = datetime.now(UTC)
    dims = [
        {"Name": "ClusterName", "Value": "ml-prod"},
        {"Name": "InstanceId", "Value": INSTANCE},
        {"Name": "NodeName", "Value": NODE},
    ]
    data = [
        {
            "MetricName": "node_gpu_utilization",
            "Dimensions": dims,
            "Timestamp": now - timedelta(minutes=1 + 5 * i),
            "Value": value,
            "Unit": "Percent",
        }
        for i, value in enumerate([0.0, 1.5, 0.0, 2.0, 0.0, 0.0])
    ]
    boto3.client("cloudwatch", region_name="us-west-2", endpoint_url=moto_url).put_metric_data(
        Namespace="ContainerInsights", MetricData=data
    )


def gpu_idle_event(sim: KubeSim) -> dict[str, Any]:
    from sim.clock import rfc3339

    return load_event(
        "cloudwatch-alarm-state-change-gpu-idle.json", id=f"idle-{uuid.uuid4()}", time=rfc3339(sim.clock.now())
    )


@pytest.mark.parametrize("order", ["gpu-idle-first", "together"])
def test_spot_warning_wins_over_a_concurrent_gpu_idle_reclaim(order: str, tmp_path: Path, moto_server: str) -> None:
    # Given an idle Spot GPU node (idle by CloudWatch) that is also about to be interrupted
    put_idle_utilization(moto_server)
    # the trainer acknowledges its checkpoint after 5 s: the reclaim's drain is still waiting when the
    # Spot process (a cold `gpuwarden invoke`, ~1-3 s on a loaded machine) arrives. With 0.5 s the reclaim
    # could finish first under load, and the race this test is about never happened.
    with fresh_sim(speed=1.0, ack_delay=5.0) as (sim, _workloads):
        cluster = build_cluster(sim, grace=1)
        # a spare GPU node, so that the reclaim may take the node at all: its Job and ReplicaSet pods
        # would otherwise come straight back on new capacity (kinds/gpu_idle/reschedule.py)
        sim.create(gpu_node("ip-10-0-3-50.us-west-2.compute.internal", "i-0a5a5a5a5a5a5a5a5", nodepool="gpu-training"))
        node_obj = sim.get("Node", cluster.node)
        assert node_obj is not None
        original_claim = sim.create(nodeclaim_for(node_obj))["metadata"]["name"]
        idle = gpu_idle_event(sim)
        spot = spot_event(sim.clock.now(), id=f"spot-{uuid.uuid4()}")
        env = invoke_env(sim, moto_server)
        # When the gpu-idle alarm and the Spot warning are handled at once by separate processes
        idle_proc = start(write_event(tmp_path, idle, "idle.json"), env)
        if order == "gpu-idle-first":
            taken = sim.wait_until(
                lambda: any(
                    t.get("value") == "gpu-idle"
                    for t in (sim.get("Node", cluster.node) or {}).get("spec", {}).get("taints") or []
                ),
                timeout=30,
            )
            assert taken, finish(idle_proc)
        spot_proc = start(write_event(tmp_path, spot, "spot.json"), env)
        replay.note(spot_event_id=spot["id"], idle_event_id=idle["id"], order=order)
        spot_rc, spot_result, spot_err = finish(spot_proc)
        idle_rc, idle_result, idle_err = finish(idle_proc)
        keep_runs(tmp_path, [(spot_rc, spot_result, spot_err), (idle_rc, idle_result, idle_err)])
        # Then the involuntary one wins, cleanly
        assert spot_rc == 0, spot_err
        assert idle_rc == 0, idle_err
        assert spot_result["outcome"] == "handled", spot_result
        assert idle_result["outcome"] == "ignored", idle_result
        assert idle_result["reason"], idle_result
        node = sim.get("Node", cluster.node)
        assert node is not None
        ours = [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
        assert ours == [{"key": TAINT_KEY, "value": "spot-interruption", "effect": "NoSchedule"}]
        assert node["metadata"]["annotations"]["gpuwarden.io/kind"] == "spot-interruption"
        assert node["metadata"]["annotations"]["gpuwarden.io/event-id"] == spot["id"]
        assert node["spec"]["unschedulable"] is True
        # the reclaim did not retire the node under the Spot drain; exactly one replacement
        kept = sim.get("NodeClaim", original_claim)
        assert kept is not None
        assert not kept["metadata"].get("deletionTimestamp"), "gpu-idle retired a node the Spot path holds"
        claims = [c["metadata"]["name"] for c in sim.list("NodeClaim") if c["metadata"]["name"] != original_claim]
        assert len(claims) == 1, claims
        assert drained(sim, cluster.must_go)
        for result in (idle_result, spot_result):  # the notice's id (a CloudWatch alarm's is its state change's)
            item = ledger_item(moto_server, result["event_id"])
            assert item is not None, result["event_id"]
            assert item["outcome"] == result["outcome"]
