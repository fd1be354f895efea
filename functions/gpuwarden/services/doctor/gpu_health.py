"""Whether Karpenter's forceful node repair is on (its `NodeRepair` feature gate), a fact doctor
reads for the `gpu-health` check (that check is the gpu-unhealthy kind's: kinds/gpu_unhealthy/doctor.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CHECK = "gpu-health"
#: Karpenter's feature gates: the FEATURE_GATES env var (its chart's settings.featureGates) or the flag.
GATES_ENV = "FEATURE_GATES"
GATES_FLAG = "--feature-gates="


def _containers(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("containers") or [])


def node_repair_on(deployment: Mapping[str, Any]) -> bool:
    """Karpenter's `NodeRepair` gate, as its env var or flag sets it."""
    for container in _containers(deployment):
        gates = [str(e.get("value") or "") for e in container.get("env") or [] if e.get("name") == GATES_ENV]
        gates += [str(a)[len(GATES_FLAG) :] for a in container.get("args") or [] if str(a).startswith(GATES_FLAG)]
        for text in gates:
            flags = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
            if flags.get("NodeRepair", "").strip().lower() == "true":
                return True
    return False
