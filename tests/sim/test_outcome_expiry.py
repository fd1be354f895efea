"""Karpenter's expiry in the outcome runs (docs/simulate.md#expiry): the one-node fine-tuning job of
test_outcome on an on-demand pool whose nodes expire (`expireAfter` 2h, budget `nodes: '0'`); the
node has run 1h10m at the start, so Karpenter expires it at 50:00. A checkpoint every 30 min (60 s
write) from t = 0."""

from __future__ import annotations

import pytest

from sim.outcome.causes import Cause, attribute, by_cause, lost_to_expiry
from sim.outcome.events import node_ages
from sim.outcome.runner import Arm, run_arm
from tests.sim.outcome_scenarios import AGES, GPUS, expiring, tiny


@pytest.mark.parametrize("arm", [Arm.NOTHING, Arm.KARPENTER])
def test_karpenter_expires_the_node_forcefully_and_the_work_since_the_last_checkpoint_is_lost(arm: Arm) -> None:
    result = run_arm(expiring(), arm, [], days=0.1, ages=AGES)
    # Then at 50:00 Karpenter deleted the NodeClaim (its budget of 0 holds no expiry) and evicted
    # the job, which does not save on SIGTERM: the 20 min since the 30:00 checkpoint are lost
    assert result.figures["nodes_expired_by_karpenter"] == 1
    assert by_cause(attribute(result)) == {Cause.EXPIRED_BY_KARPENTER.value: pytest.approx(20 * GPUS, abs=1)}
    assert lost_to_expiry(result) == pytest.approx(20 * GPUS, abs=1)


def test_gpuwarden_drains_the_node_before_its_expiry_checkpoint_first() -> None:
    result = run_arm(expiring(), Arm.GPUWARDEN, [], days=0.1, ages=AGES)
    # Then the reconcile at the start planned the drain 30 min before the expiry (20:00); the job
    # was asked, wrote its checkpoint and moved: almost nothing lost on the expiring node
    first, *_ = result.gpuwarden_results
    (planned,) = [a for a in first["actions"] if a["type"] == "expiry-planned"]
    assert planned["start"] == "2026-03-02T00:20:00Z", planned
    drained = next(r for r in result.gpuwarden_results if r.get("kind") == "karpenter-expiry")
    types = [a["type"] for a in drained["actions"]]
    assert types.index("cordon") < types.index("checkpoint-requested") < types.index("evict"), types
    # (gpuwarden's replacement is of the same pool, expireAfter 2h: Karpenter expires the drained
    # node at 50:00, and gpuwarden plans the replacement's expiry at the next reconcile)
    assert Cause.EXPIRED_BY_KARPENTER.value not in by_cause(attribute(result))
    assert lost_to_expiry(result) < 2 * GPUS


def test_the_same_seed_gives_the_same_node_ages() -> None:
    scenario = expiring(nodes=4)
    assert node_ages(scenario, 7) == node_ages(scenario, 7)
    assert node_ages(scenario, 7) != node_ages(scenario, 8)
    assert all(0 <= age < 2 * 3600 for age in node_ages(scenario, 7)["spot"])
    assert node_ages(tiny(), 7) == {}
