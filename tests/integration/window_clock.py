"""The budget-window tests' clock and night window (docs/windows.md): window decisions at a fixed
moment (as GPUWARDEN_NOW fixes them), in-process or through `gpuwarden invoke` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuwarden.domain.policy import Policy
from gpuwarden.services.engine.context import Deps
from tests.integration.conftest import World

NIGHT = {"name": "night-cap", "schedule": "0 22 * * *", "timezone": "UTC", "duration": "8h", "max_disruptions": 1}
NIGHT_2230 = datetime(2026, 6, 1, 22, 30, tzinfo=UTC)
MORNING_0630 = datetime(2026, 6, 2, 6, 30, tzinfo=UTC)


def at(world: World, when: datetime, p: Policy) -> Deps:
    deps = world.deps(p)
    deps.window_clock = lambda: when
    return deps


#: the night window, capped at 8 GPUs
GPU_CAP = {**NIGHT, "max_disruptions": 2, "gpu_limit": 8}


def run_cli(world: World, tmp_path: Path, now: str, event: Path) -> tuple[int, dict[str, Any]]:
    """`gpuwarden invoke EVENT` with the night-cap policy at GPUWARDEN_NOW: (exit code, JSON answer)."""
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"cluster": "ml-prod", "windows": [GPU_CAP]}))
    env = {
        **os.environ,
        "KUBECONFIG": str(world.sim.kubeconfig_path),
        "GPUWARDEN_POLICY_FILE": str(policy_file),
        "GPUWARDEN_NOW": now,
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    env.pop("GPUWARDEN_STATE_TABLE", None)
    cli = Path(sys.executable).parent / "gpuwarden"
    done = subprocess.run([str(cli), "invoke", str(event)], env=env, capture_output=True, text=True, timeout=60)
    answer: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}
    return done.returncode, answer
