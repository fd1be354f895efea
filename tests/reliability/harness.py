"""The reliability suite's shared tools: a small Spot cluster, a write observer, the invariants.

The observer watches the simulator from the inside (a never-matching fault predicate sees
every request body in the request's own thread; `on_change` sees every effective write in
the same thread), so each write is paired with the request that caused it: which pod was
evicted and which was deleted, when (sim time), and in what order relative to the
checkpoint request written on it.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dateutil.parser import isoparse

from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.apiserver.faults import RequestInfo
from sim.builders import daemonset_pod, gpu_node, inference_pod, job, mirror_pod, nodepool, pdb, pod, training_pod
from sim.clock import rfc3339
from sim.stepped import SteppedClock

EVENTS = Path(__file__).resolve().parents[2] / "events"
NODE = "ip-10-0-1-23.us-west-2.compute.internal"
OTHER = "ip-10-0-2-40.us-west-2.compute.internal"
INSTANCE = "i-0abc1234def567890"
OTHER_INSTANCE = "i-0fedcba9876543210"
TAINT_KEY = "gpuwarden.io/disruption"
REQUESTED = "gpuwarden.io/checkpoint-requested"


def load_event(name: str, **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    event.update(overrides)
    return event


def spot_event(now: datetime, age: float = 0.0, instance: str = INSTANCE, **overrides: Any) -> dict[str, Any]:
    """The Spot warning sample, sent `age` sim seconds ago (its deadline is time + 120 s)."""
    event = load_event("spot-interruption.json", time=rfc3339(now - timedelta(seconds=age)), **overrides)
    event["detail"] = {**event["detail"], "instance-id": instance}
    event["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}"]
    return event


# ------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    node: str
    instance_id: str
    trainers: list[str] = field(default_factory=list)  # "ns/name", opted in
    plain: list[str] = field(default_factory=list)  # on the node, no handshake
    daemonset_pod: str = ""
    mirror_pod: str = ""
    elsewhere: list[str] = field(default_factory=list)  # pods on the other node

    @property
    def must_go(self) -> list[str]:
        return [*self.trainers, *self.plain]

    @property
    def must_stay(self) -> list[str]:
        return [self.daemonset_pod, self.mirror_pod]


def build_cluster(
    sim: KubeSim,
    *,
    modes: tuple[str, ...] = ("signal:SIGUSR1", "exec:/bin/checkpoint --now", "annotate"),
    inference: int = 2,
    pdb_min_available: int | str | None = 1,
    grace: int = 5,
    karpenter: bool = True,
    instance_id: str = INSTANCE,
    checkpoint_timeout: int | None = None,
) -> Cluster:
    """A Spot GPU node with a trainer per checkpoint mode, a DaemonSet pod, a mirror pod and
    inference replicas behind a PDB; a second node holds other replicas and an opted-in
    trainer that nothing may touch."""
    pool = "gpu-training" if karpenter else None
    if pool:
        sim.create(nodepool(pool))
    node = sim.create(gpu_node(NODE, instance_id, nodepool=pool, ip="10.0.1.23"))
    other = sim.create(gpu_node(OTHER, OTHER_INSTANCE, nodepool=pool))
    out = Cluster(node=NODE, instance_id=instance_id)
    for i, mode in enumerate(modes):
        owner = sim.create(job(f"train-{i}", "ml"))
        obj = sim.create(
            training_pod(
                f"train-{i}-worker",
                node,
                gpus=2,
                checkpoint=mode,
                owner=owner,
                grace=grace,
                checkpoint_timeout=checkpoint_timeout,
            )
        )
        out.trainers.append(f"ml/{obj['metadata']['name']}")
    ds = sim.create(daemonset_pod(node))
    out.daemonset_pod = f"kube-system/{ds['metadata']['name']}"
    mirror = sim.create(mirror_pod("kube-proxy", node))
    out.mirror_pod = f"kube-system/{mirror['metadata']['name']}"
    labels = {"app": "inference"}
    for i in range(inference):
        here = sim.create(inference_pod(f"inference-{i}", node, labels=labels, grace=grace))
        out.plain.append(f"serving/{here['metadata']['name']}")
        there = sim.create(inference_pod(f"inference-other-{i}", other, labels=labels, grace=grace))
        out.elsewhere.append(f"serving/{there['metadata']['name']}")
    bystander = sim.create(training_pod("bystander-worker", other, gpus=2, checkpoint="annotate", grace=grace))
    out.elsewhere.append(f"ml/{bystander['metadata']['name']}")
    sim.create(daemonset_pod(other))
    plain = sim.create(pod("sidecar-free", other, "default", grace=grace))
    out.elsewhere.append(f"default/{plain['metadata']['name']}")
    if pdb_min_available is not None and inference:
        sim.create(pdb("inference", "serving", labels, min_available=pdb_min_available))
    return out


# ------------------------------------------------------------------------- the observer


@dataclass(frozen=True)
class Write:
    seq: int
    at: datetime  # sim time of the effective write
    method: str  # of the request that caused it ("" for the simulator's own writes)
    path: str
    query: dict[str, list[str]]
    body: Any
    kind: str
    event: str
    obj: dict[str, Any]

    @property
    def key(self) -> str:
        meta = self.obj.get("metadata") or {}
        ns = meta.get("namespace")
        return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Observer:
    """Every request body (seen before a fault applies) and every effective write, in order."""

    def __init__(self, sim: KubeSim) -> None:
        self.sim = sim
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._local = threading.local()
        self.attempts: list[tuple[int, str, str, Any]] = []  # (seq, method, path, body) of every write request
        self.writes: list[Write] = []
        sim.faults.inject(latency=1e-9, predicate=self._see)  # first fault: sees every request, matches none
        sim.on_change(self._changed)

    def _see(self, req: RequestInfo) -> bool:
        body: Any = None
        if req.body:
            try:
                body = json.loads(req.body)
            except ValueError:
                body = req.body[:200]
        self._local.request = (req.method, req.path, req.query, body)
        if req.method != "GET":
            with self._lock:
                self.attempts.append((next(self._seq), req.method, req.path, body))
        return False

    def _changed(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        method, path, query, body = getattr(self._local, "request", ("", "", {}, None))
        with self._lock:
            self.writes.append(
                Write(next(self._seq), self.sim.clock.now(), method, path, query, body, kind, event, obj)
            )
        self._local.request = ("", "", {}, None)  # a nested (controller) write is the simulator's own

    # -- questions -------------------------------------------------------------------------
    def pod_writes(self, key: str) -> list[Write]:
        with self._lock:
            return [w for w in self.writes if w.kind == "Pod" and w.key == key]

    def asked(self, key: str) -> Write | None:
        return next((w for w in self.pod_writes(key) if REQUESTED in _annotations(w.obj)), None)

    def removal(self, key: str) -> Write | None:
        """The first write that took the pod away: an eviction, a delete, or the reaper."""
        return next(
            (w for w in self.pod_writes(key) if w.event == "DELETED" or w.obj["metadata"].get("deletionTimestamp")),
            None,
        )

    def taint_writes(self, node: str) -> list[Write]:
        """Effective node writes whose request set the gpuwarden taint."""
        with self._lock:
            return [
                w
                for w in self.writes
                if w.kind == "Node"
                and w.key == node
                and w.method == "PATCH"
                and any(t.get("key") == TAINT_KEY for t in ((w.body or {}).get("spec") or {}).get("taints") or [])
            ]

    def write_attempt_paths(self) -> list[str]:
        with self._lock:
            return [path for _, method, path, _ in self.attempts]


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


# ------------------------------------------------------------------------- the invariants


def snapshot(sim: KubeSim, keys: list[str]) -> dict[str, tuple[str, dict[str, str], str | None]]:
    out = {}
    for key in keys:
        ns, name = key.split("/")
        obj = sim.get("Pod", name, ns)
        assert obj is not None, key
        meta = obj["metadata"]
        out[key] = (meta["resourceVersion"], dict(meta.get("annotations") or {}), meta.get("deletionTimestamp"))
    return out


def pod_paths(key: str) -> tuple[str, str]:
    ns, name = key.split("/")
    return f"/api/v1/namespaces/{ns}/pods/{name}", f"/api/v1/namespaces/{ns}/pods/{name}/"


def check_untouched(sim: KubeSim, observer: Observer, cluster: Cluster, before: dict[str, Any]) -> None:
    """No pod outside the node was written or even addressed by a write; DaemonSet and mirror pods stay."""
    assert snapshot(sim, list(before)) == before
    touched = observer.write_attempt_paths()
    for key in [*cluster.elsewhere, *cluster.must_stay]:
        exact, prefix = pod_paths(key)
        hits = [p for p in touched if p == exact or p.startswith(prefix)]
        # DaemonSet and mirror pods are never asked, evicted or deleted; other nodes' pods never addressed
        assert not hits, (key, hits)
    for key in cluster.must_stay:
        ns, name = key.split("/")
        obj = sim.get("Pod", name, ns)
        assert obj is not None, key
        assert not obj["metadata"].get("deletionTimestamp"), key


def check_checkpoint_before_removal(observer: Observer, cluster: Cluster, actions: list[dict[str, Any]]) -> None:
    """Every opted-in pod was asked before it was evicted or deleted, unless the run says why not."""
    for key in cluster.trainers:
        gone = observer.removal(key)
        if gone is None:
            continue
        asked = observer.asked(key)
        if asked is not None and asked.seq < gone.seq:
            continue
        why = [a for a in actions if a.get("pod") == key and a["type"] in ("evict", "delete")]
        assert why, (key, asked, gone)
        assert "deadline passed before a checkpoint" in str(why[0].get("reason")), (key, asked, gone, why)


def check_involuntary_deletes(observer: Observer, cluster: Cluster, deadline: datetime, grace: int) -> None:
    """A pod is only deleted (not evicted) at or after its `deadline - terminationGracePeriodSeconds`."""
    for key in cluster.must_go:
        for w in observer.pod_writes(key):
            if w.method != "DELETE":
                continue
            previously_terminating = any(
                x.obj["metadata"].get("deletionTimestamp") for x in observer.pod_writes(key) if x.seq < w.seq
            )
            if previously_terminating:
                continue  # shortening an eviction's grace at the deadline
            assert w.at >= deadline - timedelta(seconds=grace), (key, w.at, deadline)


def check_drained_or_reported(sim: KubeSim, cluster: Cluster, result: dict[str, Any]) -> None:
    node = sim.get("Node", cluster.node)
    assert node is not None
    assert node["spec"].get("unschedulable") is True, (result["outcome"], result.get("reason"))
    taints = node["spec"].get("taints") or []
    assert {"key": TAINT_KEY, "value": "spot-interruption", "effect": "NoSchedule"} in taints, taints
    drain = result.get("drain") or {}
    left = [k for k in cluster.must_go if sim.get("Pod", *reversed(k.split("/"))) is not None]
    terminating = [
        k for k in left if (sim.get("Pod", *reversed(k.split("/"))) or {}).get("metadata", {}).get("deletionTimestamp")
    ]
    if drain.get("outcome") in ("drained", "drained-late"):
        assert not left or left == terminating, left
    else:
        # not drained: the result must say why
        assert result["outcome"] in ("handled", "duplicate", "failed"), result
        assert drain.get("outcome") in ("deadline-passed", "blocked") or result["outcome"] == "failed", result
        assert result.get("reason"), result


def check_ends_in_time(result: dict[str, Any], deadline: datetime) -> None:
    """The drain ends before the deadline, or its outcome says it did not (drained-late, deadline-passed).

    Measured at the drain's end (the `drain-complete` / `drain-blocked` action), not the process's:
    the replacement may still be launching (the instance is gone at the deadline, the capacity is not).
    AWS SDK backoff is real time while the simulator runs 40x, so only the drain is comparable.
    """
    drain = result.get("drain") or {}
    ends = [a for a in result.get("actions", []) if a["type"] in ("drain-complete", "drain-blocked")]
    assert ends, result
    ended = isoparse(ends[-1]["at"])
    if drain.get("outcome") == "drained":
        # seconds_left is taken at the start of the round that saw the node empty; the action a moment later
        assert drain["seconds_left"] >= 0, drain
        assert ended <= deadline + timedelta(seconds=2), (ended, deadline)
    elif ended > deadline:
        assert drain.get("outcome") in ("drained-late", "deadline-passed"), drain


def deadline_of(event: dict[str, Any]) -> datetime:
    return isoparse(event["time"]) + timedelta(seconds=120)


@contextmanager
def fresh_sim(speed: float | None = 20.0, ack_delay: float = 1.0) -> Iterator[tuple[KubeSim, Workloads]]:
    """``speed=None``: the clock that moves only when the code sleeps (sim/stepped.py)."""
    with KubeSim(clock_speed=speed or 0.0, clock=SteppedClock() if speed is None else None) as sim:
        yield sim, Workloads(sim, delay=ack_delay).install()


# --------------------------------------------------------------------------- deliveries as separate processes
# Each delivery a `gpuwarden invoke` subprocess, as a separate Lambda instance would be.

GPUWARDEN = str(Path(sys.executable).with_name("gpuwarden"))


def start(event_file: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GPUWARDEN, "invoke", str(event_file)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    try:
        result = json.loads(out)
    except ValueError:
        result = {"unparsed": out[-2000:]}
    return proc.returncode, result, err[-4000:]


def write_event(tmp_path: Path, event: dict[str, Any], name: str = "event.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(event))
    return path


def drained(sim: KubeSim, keys: list[str]) -> bool:
    return all(sim.get("Pod", k.split("/")[1], k.split("/")[0]) is None for k in keys)
