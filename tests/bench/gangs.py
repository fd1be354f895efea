"""Gangs: a notice for one node of a distributed job asks every rank (docs/training-jobs.md).

    .venv/bin/python -m tests.bench.run --only gangs
    .venv/bin/python -m tests.bench.gangs [--runs 10]      # the same figures, printed

Three scenes, each on a simulator in this process (real clock). The timed two run the handler
warm in a process of its own (`tests.bench.gangs_child`, as tests/bench/latency.py does: a Lambda
never shares an interpreter with the API server); the drain is handed to a no-op workflow
starter, so the urgent invocation is what is timed, and the clock starts before the event is
parsed:

- **JobSet 16 x 8**: a JobSet of 16 child Jobs, each 8 ranks on one p4d node (128 ranks, all
  `signal:SIGUSR1`); a Spot warning for one node. Figure: notice -> the last rank's SIGUSR1 sent
  (every rank of the job, on every node). Goals: p50 <= 1 s, p99 <= 2 s. Each run a new JobSet in
  its own namespace, on 16 new nodes.
- **Capacity Block 16 nodes, 2 gangs**: a block of 16 nodes holding two such JobSets of 8 nodes;
  EC2's expiration warning for the block (one event, 16 nodes). Figures: notice -> every pod of both
  gangs signalled (goal <= 2 s), and how often each pod was signalled (goal: exactly once). Each
  run a new block of 16 new nodes.
- **Requests per Spot notice** (the handler in this process: a count, not a time): a node of 30
  pods (a device-plugin DaemonSet pod, 4 trainers opted in with `signal:SIGUSR1`, 25 Job pods),
  the simulator's request log from the notice to the hand-off to the drain workflow (before any
  drain round): without gangs (4 single-pod Jobs), and with the 4 trainers as ranks of one
  Indexed Job. Goal: <= 14 without gangs, at most one more
  LIST per gang, counted without the contract's Kubernetes Events (one per step on the node,
  posted once the work is done), which are reported beside it.

API requests per notice stand beside each figure (the simulator's request log: every HTTP request,
pods/exec included), with where they go (verb + resource).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from dateutil.parser import isoparse

from tests.bench.common import Figure, WarmProcess, bench_env, figure, warm_process

NODES, PODS = 16, 8
GOAL_RANKS_P50, GOAL_RANKS_P99, GOAL_BLOCK = 1.0, 2.0, 2.0
GOAL_REQUESTS = 14
BLOCK = "cr-0b1e55ed00000bench"
SMALLEST: dict[str, int] = {"runs": 1}


@contextmanager
def _env() -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-west-2", AWS_DEFAULT_REGION="us-west-2"
    )
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.pop("KUBECONFIG", None)
    from moto import mock_aws

    from gpuwarden.observability import logger

    logger.setLevel("WARNING")
    try:
        with mock_aws():
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _deps(sim: Any) -> Any:
    from sim.wiring import sim_deps

    deps = sim_deps(sim, caller="bench")
    deps.start_drain = lambda _state: None  # the drain workflow's start: the urgent invocation is timed
    return deps


def _jobset(sim: Any, name: str, namespace: str, nodes: list[Any]) -> list[str]:
    from sim.training_jobs import jobset_pod

    pods = []
    for job_index, node in enumerate(nodes):
        for rank in range(PODS):
            pod = jobset_pod(name, "workers", job_index, rank, node, namespace=namespace, gpus=1)
            pods.append(f"{namespace}/{sim.create(pod)['metadata']['name']}")
    return pods


def _nodes(sim: Any, prefix: str, count: int, block: str | None = None) -> list[Any]:
    """``count`` GPU nodes with a device-plugin pod each: Spot, or in the Capacity Block ``block``."""
    from sim import builders as b

    made = []
    for n in range(count):
        name = f"ip-10-{prefix}-{n}.us-west-2.compute.internal"
        body = b.gpu_node(
            name,
            "i-0" + hashlib.sha256(f"{prefix}/{n}".encode()).hexdigest()[:16],
            capacity_type="reserved" if block else "spot",
        )
        if block:
            body["metadata"]["labels"] |= {
                "karpenter.k8s.aws/capacity-reservation-id": block,
                "karpenter.k8s.aws/capacity-reservation-type": "capacity-block",
            }
        node = sim.create(body)
        sim.create(b.daemonset_pod(node))
        made.append(node)
    return made


def _spot(instance: str, at: datetime) -> dict[str, Any]:
    from tests.integration.conftest import load_event

    event: dict[str, Any] = load_event(
        "spot-interruption.json",
        time=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        resources=[f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}"],
        detail={"instance-id": instance, "instance-action": "terminate"},
    )
    return event


class _Handler:
    """The warm handler in a process of its own (`tests.bench.gangs_child`), talking to ``sim``."""

    def __init__(self, process: WarmProcess) -> None:
        self._process = process

    def handle(
        self, event: dict[str, Any], blocks: list[dict[str, str]] | None = None
    ) -> tuple[datetime, dict[str, Any]]:
        """One event; answers the notice time (before the event was parsed) and the result."""
        answer = self._process.ask({"event": event, "blocks": blocks or []})
        return datetime.fromisoformat(answer["notice"]), answer["result"]


@contextmanager
def _handler(sim: Any) -> Iterator[_Handler]:
    env = bench_env(
        KUBECONFIG=str(sim.kubeconfig_path), POWERTOOLS_LOG_LEVEL="WARNING", POWERTOOLS_METRICS_DISABLED="true"
    )
    with warm_process("tests.bench.gangs_child", [], env) as process:
        yield _Handler(process)


def _instance(node: Any) -> str:
    return str(node["spec"]["providerID"]).rsplit("/", 1)[-1]


def _where(requests: list[Any]) -> dict[str, int]:
    """verb + resource of each request (pods/exec, pods/eviction, nodeclaims …), counted."""

    def key(r: Any) -> str:
        parts = [p for p in r.path.split("?")[0].split("/") if p]
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # past /api/v1 or /apis/<group>/<version>
        if parts[:1] == ["namespaces"] and len(parts) > 2:
            parts = parts[2:]
        resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
        if "labelSelector" in r.query:
            resource += "?labelSelector"
        elif "fieldSelector" in r.query:
            resource += "?fieldSelector"
        failed = "" if 100 < r.status < 300 else f" {r.status}"  # 101: the exec WebSocket upgrade
        return f"{r.method} {resource}{failed}"

    return dict(sorted(Counter(key(r) for r in requests).items()))


def _last(actions: list[dict[str, Any]], kind: str, notice: datetime) -> tuple[float, int]:
    times = [isoparse(a["at"]) for a in actions if a["type"] == kind]
    return (max(times) - notice).total_seconds() if times else float("nan"), len(times)


def jobset_ranks(runs: int) -> tuple[list[Figure], dict[str, Any]]:
    from sim import KubeSim
    from sim import builders as b
    from sim.actors.workloads import Workloads

    seconds: list[float] = []
    requests: list[float] = []
    where: dict[str, int] = {}
    with KubeSim(clock_speed=1.0) as sim, _handler(sim) as handler:
        Workloads(sim, delay=30.0).install()
        sim.create(b.nodepool(gpu_limit=None))
        for run in range(runs + 1):  # the first run warms the handler up
            namespace = f"bench-{run}"
            sim.api.ensure_namespace(namespace)
            nodes = _nodes(sim, f"20{run}", NODES)
            pods = _jobset(sim, f"pretrain-{run}", namespace, nodes)
            sim.clear_requests()
            notice, result = handler.handle(_spot(_instance(nodes[3]), datetime.now(UTC)))
            took, signals = _last(result["actions"], "signal", notice)
            assert signals == len(pods), (signals, len(pods), result["reason"])
            if run:
                seconds.append(took)
                requests.append(len(sim.requests))
                where = _where(sim.requests)
    note = f"{NODES} nodes x {PODS} ranks = {NODES * PODS} SIGUSR1"
    note += f"; requests per notice {min(requests):.0f}-{max(requests):.0f}"
    return [
        figure(
            "gang: notice → every rank of a 16x8 JobSet signalled (p50)",
            "s",
            seconds,
            goal=GOAL_RANKS_P50,
            stat="p50",
            note=note,
        ),
        figure(
            "gang: notice → every rank of a 16x8 JobSet signalled (p99)", "s", seconds, goal=GOAL_RANKS_P99, stat="p99"
        ),
        figure("gang: API requests per Spot notice (16x8 JobSet)", "requests", requests),
    ], {"jobset_requests_where": where}


def capacity_block(runs: int) -> tuple[list[Figure], dict[str, Any]]:
    from sim import KubeSim
    from sim import builders as b
    from sim.actors.workloads import Workloads
    from tests.integration.conftest import load_event

    seconds: list[float] = []
    requests: list[float] = []
    once: list[float] = []
    where: dict[str, int] = {}
    with KubeSim(clock_speed=1.0) as sim, _handler(sim) as handler:
        Workloads(sim, delay=30.0).install()
        sim.create(b.nodepool(gpu_limit=None))
        for run in range(runs + 1):  # the first run warms the handler up; each run its own block
            block = f"{BLOCK}{run:02d}"
            nodes = _nodes(sim, f"30{run}", NODES, block=block)
            namespace = f"train-{run}"
            sim.api.ensure_namespace(namespace)
            pods = _jobset(sim, f"llm-a-{run}", namespace, nodes[: NODES // 2])
            pods += _jobset(sim, f"llm-b-{run}", namespace, nodes[NODES // 2 :])
            at = datetime.now(UTC)
            end = at + timedelta(minutes=40)
            event = load_event("capacity-block-expiration-warning.json")
            event["time"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
            event["detail"]["capacity-reservation-id"] = block
            event["detail"]["end-date"] = end.strftime("%Y-%m-%dT%H:%M:%SZ")
            sim.clear_requests()
            exec_before = len(sim.exec_log)
            notice, result = handler.handle(event, [{"id": block, "end": end.isoformat()}])
            actions = [a for one in result.get("results") or [result] for a in one["actions"]]
            took, _ = _last(actions, "signal", notice)
            per_pod = Counter(f"{r.namespace}/{r.pod}" for r in sim.exec_log[exec_before:])
            assert set(per_pod) == set(pods), (len(per_pod), len(pods), result["reason"])
            if run:
                seconds.append(took)
                requests.append(len(sim.requests))
                once.append(max(per_pod.values()))
                where = _where(sim.requests)
    note = (
        f"{NODES} nodes, 2 JobSets of {NODES // 2}x{PODS}; requests per warning {min(requests):.0f}-{max(requests):.0f}"
    )
    return [
        figure(
            "gang: Capacity Block end → every pod of 2 gangs signalled",
            "s",
            seconds,
            goal=GOAL_BLOCK,
            stat="p99",
            note=note,
        ),
        figure("gang: Capacity Block end: signals per pod (most)", "signals", once, goal=1, stat="p99"),
        figure("gang: API requests per Capacity Block warning (16 nodes)", "requests", requests),
    ], {"block_requests_where": where}


def _is_event(request: Any) -> bool:
    return bool(request.method == "POST" and str(request.path).split("?")[0].endswith("/events"))


def request_count(runs: int) -> tuple[list[Figure], dict[str, Any]]:
    """Requests from the Spot notice to the hand-off, for a 30-pod node with 4 checkpointing pods
    (in this process: a count, not a time).

    The goal counts the requests that do the work; the Kubernetes Events the contract asks for (one
    on the node per step: cordoned, checkpoint requested, replacement launched) are posted after
    that work, once per reason, and stand beside it as a figure of their own, and in every total."""
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from sim import KubeSim
    from sim import builders as b
    from sim.actors.workloads import Workloads
    from sim.training_jobs import indexed_job_pod

    cases = ("no gang", "one gang")
    counts: dict[str, list[float]] = {case: [] for case in cases}
    events: dict[str, list[float]] = {case: [] for case in cases}
    where: dict[str, dict[str, int]] = {}
    with _env(), KubeSim(clock_speed=1.0) as sim:
        Workloads(sim, delay=30.0).install()
        sim.create(b.nodepool(gpu_limit=None))
        deps = _deps(sim)
        for run in range(runs + 1):
            for case in cases:
                node = _nodes(sim, f"4{run}{len(case)}", 1)[0]
                for p in range(4):
                    if case == "no gang":
                        owner = sim.create(b.job(f"ft-{run}-{p}", "ml"))
                        sim.create(b.training_pod(f"ft-{run}-{p}-worker", node, gpus=2, owner=owner))
                    else:
                        sim.create(indexed_job_pod(f"ddp-{run}", p, node, gpus=2))
                for p in range(25):
                    owner = sim.create(b.job(f"batch-{run}-{len(case)}-{p}", "ml"))
                    sim.create(b.pod(f"batch-{run}-{len(case)}-{p}", node, "ml", owner=owner))
                sim.clear_requests()
                batch = parse_notices(_spot(_instance(node), datetime.now(UTC)))
                result = handle_batch(batch, deps, drain_locally=False).to_json()
                assert result["outcome"] == "handled", result["reason"]
                if run:
                    posted = sum(1 for r in sim.requests if _is_event(r))
                    counts[case].append(len(sim.requests) - posted)
                    events[case].append(posted)
                    where[case] = _where(sim.requests)

    def total(case: str) -> str:
        made = [c + e for c, e in zip(counts[case], events[case], strict=True)]
        return f"with the Events {min(made):.0f}-{max(made):.0f}; where: {where.get(case)}"

    return [
        figure(
            "requests: Spot notice, 30 pods / 4 checkpointing, no gang (Events apart)",
            "requests",
            counts["no gang"],
            goal=GOAL_REQUESTS,
            note=total("no gang"),
        ),
        figure(
            "requests: Spot notice, the 4 are ranks of one Indexed Job (Events apart)",
            "requests",
            counts["one gang"],
            goal=GOAL_REQUESTS + 1,
            note=total("one gang"),
        ),
        figure(
            "requests: the contract's Kubernetes Events of one Spot notice",
            "requests",
            events["no gang"],
            note="one per step on the node, posted after the work",
        ),
    ], {"requests_where": where}


SCENES: dict[str, Callable[[int], tuple[list[Figure], dict[str, Any]]]] = {
    "jobset": jobset_ranks,
    "block": capacity_block,
    "requests": request_count,
}


def measure(runs: int | None = None) -> tuple[list[Figure], dict[str, Any]]:
    runs = runs or int(os.environ.get("GPUWARDEN_BENCH_GANG_RUNS", "10"))
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for scene in SCENES.values():
        found, more = scene(runs)
        figures += found
        details |= more
    return figures, details


def main() -> None:
    from tests.bench.run import table

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", default=",".join(SCENES))
    args = parser.parse_args()
    began = time.monotonic()
    figures: list[Figure] = []
    for name in args.only.split(","):
        found, details = SCENES[name](args.runs)
        figures += found
        print(details)
    print(table(figures))
    for f in figures:
        if f.note:
            print(f"- {f.name}: {f.note}")
    print(f"{time.monotonic() - began:.1f} s")


if __name__ == "__main__":
    main()
