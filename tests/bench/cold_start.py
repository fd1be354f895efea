"""1. Cold start (and 5. memory): fresh processes importing a deployed handler and calling it once.

Runtime: the Lambda's Python 3.13 with the built runtime layer (``layers/runtime/build.py``)
and a copy of ``functions/`` compiled like the code asset (3.13, unchecked-hash .pyc), run
with ``-I -S`` so nothing but the code and the layer is importable — the Lambda's
``/var/task`` + ``/opt/python``. Without 3.13 or the wheel cache: the venv's Python, said so.

Each handler starts as the stack deploys it (`tests/bench/deployed.py`): its handler and its
environment read from the synthesized template, the resources that environment names (the policy
parameter holding the synthesized policy, the state table, the drain workflow) created first in a
moto server, and the variables the Lambda runtime sets (`AWS_LAMBDA_FUNCTION_NAME`: the import
runs the init phase, `handlers/_runtime.prepare`). The handlers measured are `PROBED`, named by
their `FunctionSpec` (infra/components/functions.py), the one place the stack names them too.

The first call reaches the simulator through KUBECONFIG (the deployed path would use an EKS
token from boto3 instead; that AWS round trip is not on this bench), and AWS through the moto
server (AWS_ENDPOINT_URL): the policy parameter read at init, the ledger, the workflow's start.
- interruption: a Spot warning for a fresh, empty Karpenter node: list nodes, cordon+taint,
  NodeClaim replacement, the drain handed to the workflow, Kubernetes Events, the ledger.
- drain: one `round_of` round (the workflow's input) for a node that has nothing left to evict.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from infra.components import functions as specs
from infra.components.bundling import CODE_EXCLUDES
from sim import KubeSim
from sim import builders as b
from sim.actors.workloads import Workloads
from tests.bench import deployed
from tests.bench.common import EVENTS, FUNCTIONS, REPO, Figure, bench_env, figure, percentile

PROBE = Path(__file__).resolve().parent / "cold_probe.py"
GOAL_SECONDS = 0.5
SMALLEST: dict[str, Any] = {"runs": 1}


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
    """The drain workflow's input to its first round (infra/components/drain_workflow.py)."""
    state = {
        "node": node,
        "event_id": event_id,
        "kind": "spot-interruption",
        "deadline": (at.astimezone(UTC) + timedelta(seconds=120)).isoformat(),
        "started_at": at.astimezone(UTC).isoformat(),
    }
    return {"state": state, "retry_count": 0}


#: The handlers whose cold start is measured, by the stack's FunctionSpec, and each one's first
#: event for a fresh node (its name and instance id) at a time.
PROBED: tuple[tuple[specs.FunctionSpec, Callable[[str, str, str, datetime], dict[str, Any]]], ...] = (
    (specs.INTERRUPTION, lambda node, instance, event_id, at: spot_event(instance, event_id, at)),
    (specs.DRAIN, lambda node, instance, event_id, at: drain_event(node, event_id, at)),
)


#: what each first event must answer: the Spot warning handled, the empty node's drain done
HANDLED = ("handled", "drained")


def short_name(handler: str) -> str:
    """``gpuwarden.handlers.drain.handler`` -> ``drain``."""
    return handler.rsplit(".", 2)[-2]


def lambda_environment(fn: deployed.DeployedFunction, stack: deployed.MotoStack, **bench: str) -> dict[str, str]:
    """What a process of this function sees in Lambda: the stack's variables (resolved), the
    runtime's own, test credentials; then ``bench`` (where the simulator and moto are)."""
    env = bench_env()
    for name in ("PYTHONPATH", "GPUWARDEN_CLUSTER", "POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"):
        env.pop(name)  # the stack's own values (or none) below
    memory = stack.template["Resources"][fn.logical_id]["Properties"].get("MemorySize", 128)
    name = f"{stack.stack_name}-{fn.logical_id}"
    env.update(  # the Lambda runtime's reserved variables (AWS_REGION and the keys: bench_env)
        {
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory),
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "bench",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "_HANDLER": fn.handler,
            "AWS_SESSION_TOKEN": "bench",
            "TZ": ":UTC",
            "LANG": "en_US.UTF-8",
        }
    )
    env.update(stack.environment(fn))
    env.update(bench)
    return env


def probe(
    runtime: Runtime,
    handler: str,
    event: dict[str, Any],
    env: dict[str, str],
    workdir: Path,
    importtime: bool = False,
) -> tuple[dict[str, Any], float, str]:
    """One fresh process. Returns its own figures, the parent-side process wall time, stderr."""
    import time

    event_file = workdir / f"event-{short_name(handler)}.json"
    event_file.write_text(json.dumps(event))
    flags = ["-I", "-S"] if runtime.isolated else []
    if importtime:
        flags += ["-X", "importtime"]
    cmd = [runtime.python, *flags, str(PROBE), handler, str(event_file), *runtime.paths]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=120, cwd=REPO)
    wall = time.perf_counter() - started
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("COLD ")), None)
    if line is None:
        raise RuntimeError(f"cold probe {handler} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[5:]), wall, proc.stderr


#: What every handler imports and makes before any of gpuwarden's own code runs: the SDK with
#: the three clients a first Spot warning uses (SSM at init, the ledger, the workflow), the
#: Kubernetes client (which imports pydantic), Powertools' logger and metrics. A floor for the
#: cold start on this CPU (docs/benchmarks.md, "Cold start").
FLOOR = """
import sys, time
sys.path[:0] = sys.argv[1:]
import botocore.session
session = botocore.session.get_session()
for service in ("ssm", "dynamodb", "stepfunctions"):
    session.create_client(service, region_name="us-west-2")
import kubernetes
import aws_lambda_powertools.logging, aws_lambda_powertools.metrics
print("FLOOR", time.process_time())
"""


def floor_cpu(runtime: Runtime, env: dict[str, str]) -> float:
    """One fresh process importing and making only what `FLOOR` names: its own CPU, in seconds."""
    flags = ["-I", "-S"] if runtime.isolated else []
    cmd = [runtime.python, *flags, "-c", FLOOR, *runtime.paths]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=120, cwd=REPO)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("FLOOR ")), None)
    if line is None:
        raise RuntimeError(f"cold floor probe failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(line.split()[1])


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


def measure(runs: int = 7, template: dict[str, Any] | None = None) -> tuple[list[Figure], dict[str, Any]]:
    """``runs`` measured cold starts per handler (and two more: the first, page-cache cold, and
    the last, under ``-X importtime``); ``template``: the stack's, synthesized here when not given."""
    template = template or deployed.synthesize()
    with (
        tempfile.TemporaryDirectory(prefix="gpuwarden-cold-") as tmp,
        KubeSim(clock_speed=1.0) as sim,
        deployed.moto_server() as endpoint,
    ):
        workdir = Path(tmp)
        runtime = lambda_runtime(workdir)
        Workloads(sim).install()
        stack = deployed.MotoStack(template, endpoint)
        nodes = _scene(sim, len(PROBED) * (runs + 2))
        figures: list[Figure] = []
        details: dict[str, Any] = {"runtime": runtime.label}
        for spec, first_event in PROBED:
            fn = deployed.function_for(template, spec.handler)
            env = lambda_environment(fn, stack, KUBECONFIG=str(sim.kubeconfig_path), AWS_ENDPOINT_URL=endpoint)
            name = short_name(fn.handler)
            samples, walls, cpus, first = [], [], [], None
            for i in range(runs + 2):
                node, instance = nodes.pop()
                event = first_event(node, instance, f"cold-{name}-{i}", sim.clock.now())
                last = i == runs + 1
                own, wall, stderr = probe(runtime, fn.handler, event, env, workdir, importtime=last)
                if own["outcome"] not in HANDLED:
                    raise RuntimeError(f"cold probe {fn.handler}: its first event was not handled: {own}")
                if last:
                    details[f"{name}_importtime_top10"] = top_imports(stderr)
                    details[f"{name}_probe"] = own
                elif first is None:
                    first = own["total"]
                else:
                    samples.append(own["total"])
                    walls.append(wall)
                    cpus.append(own["cpu"])
            imports = details[f"{name}_probe"]
            note = (
                f"{runtime.label}; as deployed ({fn.logical_id}: the stack's environment, the policy read from "
                f"SSM at init); import+first call in-process; first (page-cache cold) run {first:.3f} s; "
                f"process wall {percentile(walls, 50):.3f} s, its own CPU {percentile(cpus, 50):.3f} s; "
                f"kubernetes models imported: "
                f"{imports['kubernetes_model_modules']}, boto3: {imports['boto3_imported']}, "
                f"X-Ray: {imports['xray_imported']}"
            )
            figures.append(
                figure(f"cold start: {name} handler", "s", samples, goal=GOAL_SECONDS, note=note, first_run=first)
            )
            details[f"{name}_environment"] = sorted(fn.environment)
        floor = [floor_cpu(runtime, env) for _ in range(runs)]
        figures.append(
            figure(
                "cold start floor: the dependencies' own CPU (SDK + 3 clients, kubernetes, Powertools)",
                "s",
                floor,
                note=f"{runtime.label}; a fresh process, no gpuwarden code, no request: what any handler's "
                "cold start costs on this CPU before its own work (the goal above is per handler)",
            )
        )
        return figures, details
