"""The real kubectl, run against the simulator by the tests that check it behaves like an API server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sim import KubeSim


def kubectl(sim: KubeSim, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    cache = Path(sim.kubeconfig_path).parent / "kubectl-cache"
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
