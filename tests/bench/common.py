"""What every benchmark shares: figures, percentiles, child processes, the bench environment."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = REPO / "functions"
EVENTS = REPO / "events"
RESULT_PREFIX = "RESULT "


class Skipped(Exception):
    """A benchmark that cannot run here (kubectl absent, no Python 3.13 …): the message says why."""


@dataclass
class Figure:
    name: str
    unit: str
    median: float
    min: float
    max: float
    runs: int
    goal: str | None = None
    met: bool | None = None
    #: the statistic the goal is about (median, p50, p99 …) and its value
    stat: str = "median"
    value: float = math.nan
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def figure(
    name: str,
    unit: str,
    values: Sequence[float],
    *,
    goal: float | None = None,
    stat: str = "median",
    note: str = "",
    **extra: Any,
) -> Figure:
    """A figure from samples; with a goal, `met` compares `stat` (median, p50, p99 …) to it (≤)."""
    if not values:
        raise ValueError(f"{name}: no samples")
    value = percentile(values, 50.0 if stat == "median" else float(stat.lstrip("p")))
    return Figure(
        name=name,
        unit=unit,
        median=percentile(values, 50.0),
        min=min(values),
        max=max(values),
        runs=len(values),
        goal=None if goal is None else f"{stat} <= {goal:g} {unit}",
        met=None if goal is None else value <= goal,
        stat=stat,
        value=value,
        note=note,
        extra=dict(extra),
    )


def bench_env(**overrides: str) -> dict[str, str]:
    """A child's environment: fake AWS credentials (nothing may reach AWS), no stray kube config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG"))}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-west-2",
            "AWS_DEFAULT_REGION": "us-west-2",
            "GPUWARDEN_CLUSTER": "ml-prod",
            "POWERTOOLS_SERVICE_NAME": "gpuwarden",
            "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenBench",
            "PYTHONPATH": os.pathsep.join([str(REPO), str(FUNCTIONS)]),
        }
    )
    env.update(overrides)
    return env


def run_child(
    args: Sequence[str], env: Mapping[str, str], timeout: float = 300, python: str | None = None
) -> dict[str, Any]:
    """Run `python ARGS`; its stdout carries logs and one `RESULT {json}` line, which is returned."""
    cmd = [python or sys.executable, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(env), timeout=timeout, check=False, cwd=REPO)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    tail = (proc.stderr or proc.stdout)[-3000:]
    raise RuntimeError(f"{' '.join(cmd[:4])}… exited {proc.returncode} without a result:\n{tail}")


class WarmProcess:
    """A warm execution environment in a process of its own: `python -m MODULE ARGS`, which
    answers one `RESULT` line when it is ready, then one per JSON line it is sent (`ask`)."""

    def __init__(self, module: str, args: Sequence[str], env: Mapping[str, str]) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=dict(env),
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.module = module
        self.ready = self._answer()

    def ask(self, message: Mapping[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message, default=str) + "\n")
        self._proc.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(RESULT_PREFIX):
                answer: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
                return answer
        self._stderr.seek(0)
        raise RuntimeError(f"{self.module} exited {self._proc.wait()}:\n{self._stderr.read()[-3000:]}")

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._stderr.close()


@contextmanager
def warm_process(module: str, args: Sequence[str], env: Mapping[str, str]) -> Iterator[WarmProcess]:
    process = WarmProcess(module, args, env)
    try:
        yield process
    finally:
        process.close()


def emit(result: Mapping[str, Any]) -> None:
    """A child's answer to run_child (on the real stdout, whatever the handlers' loggers did)."""
    sys.__stdout__.write(RESULT_PREFIX + json.dumps(result) + "\n")  # type: ignore[union-attr]
    sys.__stdout__.flush()  # type: ignore[union-attr]


def quiet_handler_logs() -> None:
    """Send Powertools' JSON log lines to /dev/null: still formatted (their cost counts), not printed."""
    import logging

    from gpuwarden.observability import logger

    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for handler in logging.getLogger(logger.service).handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)
