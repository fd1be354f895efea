"""1. Cold start (and 5. memory): fresh processes importing a deployed handler and calling it once.

Runtime: the Lambda's Python 3.13 with the built runtime layer (``layers/runtime/build.py``)
and a copy of ``functions/`` compiled like the code asset (3.13, unchecked-hash .pyc), run
with ``-I -S`` so nothing but the code and the layer is importable — the Lambda's
``/var/task`` + ``/opt/python``. Without 3.13 or the wheel cache: the venv's Python, said so.

The first call reaches the simulator through KUBECONFIG (the deployed path would use an EKS
token from boto3 instead; that AWS round trip is not on this bench):
- interruption: a Spot warning for a fresh, empty Karpenter node: list nodes, cordon+taint,
  NodeClaim replacement, one drain round, Kubernetes Events — the whole handler, no AWS.
- drain: one `drain_step` round for a node that has nothing left to evict.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from infra.components.bundling import CODE_EXCLUDES
from sim import KubeSim
from sim import builders as b
from sim.actors.workloads import Workloads
from tests.bench.common import EVENTS, FUNCTIONS, REPO, Figure, bench_env, figure

PROBE = Path(__file__).resolve().parent / "cold_probe.py"
GOAL_SECONDS = 1.0


@dataclass(frozen=True)
class Runtime:
    python: str
    paths: tuple[str, ...]  # first on sys.path: the code, then the layer
    isolated: bool  # -I -S
    label: str


def lambda_runtime(workdir: Path) -> Runtime:
    """The layer's Python 3.13 and a 3.13-compiled code copy; else the venv's interpreter."""
    from layers.runtime import build as layer_build

    try:
        python = layer_build.find_lambda_python()
        layer = layer_build.build_layer(python=python)
    except layer_build.LayerBuildError as err:
        reason = str(err).splitlines()[0][:160]
        label = f"venv Python {sys.version_info.major}.{sys.version_info.minor} (no layer: {reason})"
        return Runtime(sys.executable, (str(FUNCTIONS),), isolated=False, label=label)
    task = workdir / "task"
    shutil.copytree(FUNCTIONS, task, ignore=shutil.ignore_patterns(*CODE_EXCLUDES))
    layer_build.compile_bytecode(python, task)
    version = layer_build.interpreter_version(python).split()[0]
    label = f"Python {version} + runtime layer ({layer.path.name[:8]}), code compiled unchecked-hash"
    return Runtime(python, (str(task), str(layer.path / "python")), isolated=True, label=label)


def spot_event(instance_id: str, event_id: str, at: datetime) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "spot-interruption.json").read_text())
    event["id"] = event_id
    event["time"] = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event["detail"]["instance-id"] = instance_id
    event["resources"] = [f"arn:aws:ec2:us-west-2:123456789012:instance/{instance_id}"]
    return event


def drain_event(node: str, event_id: str, at: datetime) -> dict[str, Any]:
    return {
        "node": node,
        "event_id": event_id,
        "kind": "spot-interruption",
        "deadline": (at.astimezone(UTC) + timedelta(seconds=120)).isoformat(),
        "started_at": at.astimezone(UTC).isoformat(),
    }


def probe(
    runtime: Runtime,
    module: str,
    event: dict[str, Any],
    env: dict[str, str],
    workdir: Path,
    importtime: bool = False,
) -> tuple[dict[str, Any], float, str]:
    """One fresh process. Returns its own figures, the parent-side process wall time, stderr."""
    import time

    event_file = workdir / f"event-{module}.json"
    event_file.write_text(json.dumps(event))
    flags = ["-I", "-S"] if runtime.isolated else []
    if importtime:
        flags += ["-X", "importtime"]
    cmd = [runtime.python, *flags, str(PROBE), module, str(event_file), *runtime.paths]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=120, cwd=REPO)
    wall = time.perf_counter() - started
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("COLD ")), None)
    if line is None:
        raise RuntimeError(f"cold probe {module} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[5:]), wall, proc.stderr


def top_imports(stderr: str, count: int = 10) -> list[dict[str, Any]]:
    """`-X importtime` lines → the modules with the most cumulative time at the top level of the
    handler's import tree (indent ≤ 2), and their self time."""
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            self_us, cumulative_us, indent, name = match.groups()
            rows.append((int(cumulative_us), int(self_us), len(indent) // 2, name))
    rows.sort(reverse=True)
    return [
        {"module": name, "cumulative_ms": round(cum / 1000, 1), "self_ms": round(own / 1000, 1), "depth": depth}
        for cum, own, depth, name in rows[:count]
    ]


def _scene(sim: KubeSim, runs: int) -> list[tuple[str, str]]:
    """`runs` empty Karpenter nodes (one per interruption cold start) and the same for drain."""
    sim.create(b.nodepool())
    made = []
    for i in range(runs):
        name = f"ip-10-9-0-{i}.us-west-2.compute.internal"
        instance = f"i-0c01d{i:012x}"
        sim.create(b.gpu_node(name, instance, ip=f"10.9.0.{i}"))
        made.append((name, instance))
    return made


def measure(runs: int = 7) -> tuple[list[Figure], dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="gpuwarden-cold-") as tmp, KubeSim(clock_speed=1.0) as sim:
        workdir = Path(tmp)
        runtime = lambda_runtime(workdir)
        Workloads(sim).install()
        # AWS_LAMBDA_FUNCTION_NAME: the import runs the init phase as Lambda does (handlers/_runtime.prepare)
        env = bench_env(KUBECONFIG=str(sim.kubeconfig_path), AWS_LAMBDA_FUNCTION_NAME="gpuwarden-bench")
        env.pop("PYTHONPATH")
        # +1: the first run of each handler warms the page cache; reported apart, not in the median
        nodes = _scene(sim, 2 * (runs + 2))
        figures: list[Figure] = []
        details: dict[str, Any] = {"runtime": runtime.label}
        for module in ("interruption", "drain"):
            samples, walls, first = [], [], None
            for i in range(runs + 2):
                name, instance = nodes.pop()
                now = sim.clock.now()
                event = (
                    spot_event(instance, f"cold-{module}-{i}", now)
                    if module == "interruption"
                    else drain_event(name, f"cold-{module}-{i}", now)
                )
                last = i == runs + 1
                own, wall, stderr = probe(runtime, module, event, env, workdir, importtime=last)
                if last:
                    details[f"{module}_importtime_top10"] = top_imports(stderr)
                    details[f"{module}_probe"] = own
                elif first is None:
                    first = own["total"]
                else:
                    samples.append(own["total"])
                    walls.append(wall)
            imports = details[f"{module}_probe"]
            note = (
                f"{runtime.label}; import+first call in-process; first (page-cache cold) run {first:.3f} s; "
                f"process wall {sorted(walls)[len(walls) // 2]:.3f} s; kubernetes models imported: "
                f"{imports['kubernetes_model_modules']}, boto3: {imports['boto3_imported']}, "
                f"X-Ray: {imports['xray_imported']}"
            )
            figures.append(
                figure(f"cold start: {module} handler", "s", samples, goal=GOAL_SECONDS, note=note, first_run=first)
            )
        return figures, details
