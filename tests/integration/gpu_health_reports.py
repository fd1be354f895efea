"""What a GPU health agent writes, for the tests that read it: a node condition from the captured
samples (events/nodes/), reported the way the agent reports it (a PATCH of the node's status)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import kubernetes

from sim import KubeSim
from sim.clock import rfc3339
from tests.integration.conftest import EVENTS


def condition(sample: str, **changes: Any) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((EVENTS / sample).read_text())
    return found | changes


def report(sim: KubeSim, node: str, cond: dict[str, Any]) -> None:
    """The agent's write: a strategic-merge PATCH of nodes/<name>/status (conditions merge by type)."""
    api = kubernetes.client.CoreV1Api(sim.api_client())
    api.patch_node_status(node, {"status": {"conditions": [cond]}})


def failing(sim: KubeSim, node: str, sample: str = "nodes/eks-accelerated-hardware-xid79.json") -> str:
    since = rfc3339(sim.clock.now() - timedelta(seconds=30))
    report(sim, node, condition(sample, lastTransitionTime=since, lastHeartbeatTime=since))
    return since
