"""`runbook drain` runs the one disruption sequence every kind's drain runs (`engine.disrupt`,
docs/architecture.md, "The pipeline"): after the mark, a failure that retrying may fix is handed on
to the drain workflow's rounds (docs/reliability.md, "After the mark"), as for a Spot warning, instead
of failing the request with the node left cordoned and half drained."""

from __future__ import annotations

from typing import Any

from gpuwarden.services.dispatch import handle_runbook
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps
from tests.integration.conftest import World, types
from tests.integration.inputs import runbook
from tests.integration.scenarios import NODE, spot_node

#: The client's attempts at one call (adapters/kube.py, `KubeClient`): a fault on each of them
#: fails that call, whatever the time it takes; the next call goes through.
CLIENT_ATTEMPTS = 6


def _evicting_inference_0_fails_once(world: World) -> Any:
    """Every attempt of the first eviction of serving/inference-0 meets a dropped connection."""
    path = r"/api/v1/namespaces/serving/pods/inference-0/eviction"
    return world.sim.faults.inject(reset=True, method="POST", path=path, count=CLIENT_ATTEMPTS)


def test_a_runbook_drain_whose_eviction_meets_a_dropped_connection_hands_on_and_drains(world: World) -> None:
    # Given the demo's node (a trainer that checkpoints on request, inference replicas without a PDB)
    # and the API server dropping the connection on each attempt at one replica's first eviction
    spot_node(world.sim, modes=("annotate",), pdb_min_available=None, grace=2)
    fault = _evicting_inference_0_fails_once(world)
    # When the on-call engineer drains the node at a terminal (the drain runs in-process)
    result = runbook(world, action="drain")
    # Then the failure after the mark is handed on, and the rounds drain the node
    assert fault.hits == CLIENT_ATTEMPTS, fault
    assert result["outcome"] == "handled", result
    assert types(result)[0] == "cordon", types(result)
    (handed,) = [a for a in result["actions"] if a["type"] == "handed-on"]
    assert handed["error"] == "ClusterUnreachable", handed
    assert "the drain workflow took over" in result["reason"], result["reason"]
    assert result["drain"]["outcome"] == "drained", result["drain"]
    replica = world.sim.get("Pod", "inference-0", "serving")
    assert replica is None or replica["metadata"].get("deletionTimestamp"), replica


def test_deployed_a_runbook_drain_whose_eviction_fails_starts_the_drain_workflow(world: World) -> None:
    # Given the same node and fault, and the drain workflow deployed (its start recorded here)
    spot_node(world.sim, modes=("annotate",), pdb_min_available=None, grace=2)
    fault = _evicting_inference_0_fails_once(world)
    started: list[dict[str, Any]] = []
    deps = world.deps()
    deps.start_drain = started.append
    # When the runbook function drains the node
    request = parse_runbook({"node": NODE, "action": "drain"})
    result = handle_runbook(request, runbook_deps(deps, request), drain_locally=False).to_json()
    # Then the answer is handled, handed on, and the workflow was started once for the node
    assert fault.hits == CLIENT_ATTEMPTS, fault
    assert result["outcome"] == "handled", result
    assert "handed-on" in types(result), types(result)
    (state,) = started
    assert (state["node"], state["kind"]) == (NODE, "manual"), state
