"""The walk a notice takes through the package: which files of functions/gpuwarden one invocation
visits, and how often it comes back into a file it had left (docs/architecture.md, "The house").

Two walks, each one first invocation of the interruption function (`handle_batch`,
``drain_locally=False``: cordon, checkpoint requests, replacement, the drain workflow started)
against the simulator over HTTP, AWS in moto:

- ``spot``: a Spot warning for a node running one checkpointing trainer;
- ``gang``: a Spot warning for rank 1 of a four-rank Indexed Job, one rank per node (every rank asked).

Counted with `sys.setprofile` (every thread) over the invocation only, the imports done first by
a warm-up invocation: ``files``, the distinct package files whose functions run; ``re-entries``,
the distinct (caller, callee) file pairs where a call goes back into a file already on the call
stack under the caller (a lower file calling back into a higher one, a helper handed a callback).
``python -m tests.bench.walk [spot|gang]`` prints one JSON line per walk; it reads no clock.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "gpuwarden"
EVENTS = PACKAGE.parents[1] / "events"


def walk_of(run: Callable[[], object]) -> tuple[set[str], set[tuple[str, str]]]:
    """The package files ``run`` calls into (every thread), and its re-entries: the (caller, callee)
    file pairs where a call goes back into a file already on the call stack under the caller (the
    walk leaves a file and comes back into it before returning out of it)."""
    files: set[str] = set()
    back: set[tuple[str, str]] = set()
    lock = threading.Lock()
    local = threading.local()
    root = str(PACKAGE) + os.sep

    def profiler(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return") or not frame.f_code.co_filename.startswith(root):
            return
        stack: list[str] = local.__dict__.setdefault("stack", [])
        name = frame.f_code.co_filename[len(root) :]
        if event == "return":
            if stack:
                stack.pop()
            return
        with lock:
            files.add(name)
            if stack and stack[-1] != name and name in stack:
                back.add((stack[-1], name))
        stack.append(name)

    threading.setprofile(profiler)
    sys.setprofile(profiler)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return files, back


@contextmanager
def _world() -> Iterator[Any]:
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-west-2",
            "AWS_REGION": "us-west-2",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    os.environ.pop("KUBECONFIG", None)
    from moto import mock_aws

    from sim import KubeSim
    from sim.actors.workloads import Workloads

    with mock_aws(), KubeSim(clock_speed=20.0) as sim:
        Workloads(sim, delay=1.0).install()
        yield sim


def _warning(sim: Any, instance: str) -> dict[str, Any]:
    from sim.clock import rfc3339

    event: dict[str, Any] = json.loads((EVENTS / "spot-interruption.json").read_text())
    event.update(time=rfc3339(sim.clock.now()), id=f"walk-{instance}")
    event["detail"]["instance-id"] = instance
    event["resources"] = [f"arn:aws:ec2:us-west-2a:instance/{instance}"]
    return event


def _node(i: int) -> str:
    return f"ip-10-0-5-{10 + i}.us-west-2.compute.internal"


def _instance(i: int) -> str:
    return f"i-0{i:016x}"


def walk(scene: str) -> dict[str, Any]:
    """One scene's first invocation, walked."""
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from sim.builders import gpu_node, nodepool, training_pod
    from sim.training_jobs import indexed_job_pod
    from sim.wiring import sim_deps

    with _world() as sim:
        sim.create(nodepool("gpu-training"))
        ranks = 4 if scene == "gang" else 1
        nodes = [sim.create(gpu_node(_node(i), _instance(i), ip=f"10.0.5.{10 + i}")) for i in range(ranks)]
        for rank, node in enumerate(nodes):
            if scene == "gang":
                sim.create(indexed_job_pod("llama-ft", rank, node, checkpoint="signal:SIGUSR1"))
            else:
                sim.create(training_pod("trainer-0", node, checkpoint="signal:SIGUSR1"))
        deps = sim_deps(sim, caller="walk")
        batch = parse_notices(_warning(sim, _instance(ranks - 1 if scene == "spot" else 1)))
        handle_batch(parse_notices(_warning(sim, "i-0ffffffffffffffff")), deps, drain_locally=False)  # warm
        outcome: list[str] = []
        files, back = walk_of(lambda: outcome.append(handle_batch(batch, deps, drain_locally=False).outcome))
    shown = sorted(f"{caller} -> {callee}" for caller, callee in back)
    return {"walk": scene, "outcome": outcome[0], "files": len(files), "re-entries": len(back), "back": shown}


def main() -> None:
    for scene in sys.argv[1:] or ["spot", "gang"]:
        print(json.dumps(walk(scene)))


if __name__ == "__main__":
    main()
