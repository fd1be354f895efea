"""On an involuntary notice the urgent work goes first: the cordon (which carries the replacement's
claim), then every checkpoint request, and only then the evictions and the NodeClaim
(services.pipeline.run)."""

from __future__ import annotations

from gpuwarden.domain import annotations as ann
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.scenarios import NODE, checkpoint_server, spot_node


def test_every_checkpoint_request_is_written_before_the_replacement_is_created(world: World) -> None:
    # Given a Spot node in a NodePool with trainers in all four checkpoint modes
    with checkpoint_server() as endpoint:
        scenario = spot_node(world.sim, http_port=endpoint.port)
        world.sim.clear_requests()
        # When the Spot warning arrives
        event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
        result = handle_batch(parse_notices(event), world.deps()).to_json()
    # Then the API server saw the cordon with the replacement's claim, then every pod's checkpoint
    # request, then the replacement
    assert result["outcome"] == "handled", result["reason"]
    writes = [r for r in world.sim.requests if r.method in ("PATCH", "POST")]
    cordon = next(i for i, r in enumerate(writes) if r.path.endswith(f"/nodes/{NODE}"))
    requests = [i for i, r in enumerate(writes) if "/pods/" in r.path and ann.CHECKPOINT_REQUESTED.encode() in r.body]
    claim = next(i for i, r in enumerate(writes) if ann.REPLACEMENT.encode() in r.body)
    nodeclaim = next(i for i, r in enumerate(writes) if r.path.endswith("/nodeclaims"))
    evictions = [i for i, r in enumerate(writes) if r.path.endswith("/eviction")]
    assert len(requests) == len(scenario.trainers)
    assert cordon < min(requests)
    assert claim == cordon  # one write on the node: the mark names the NodeClaim to come
    assert max(requests) < nodeclaim
    assert evictions
    assert max(requests) < min(evictions)  # no pod is asked to leave before every request is out
