"""The tables the services dispatch on cover what they must: the runbook's actions, the kinds' hooks."""

from __future__ import annotations

from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.gpu_idle import use_case as gpu_idle
from gpuwarden.kinds.registry import SPECS, spec_of
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.hooks import URGENT
from gpuwarden.services.runbook import actions as runbook
from gpuwarden.sources.runbook import RUNBOOK_ACTIONS


def test_every_runbook_action_has_its_code_and_nothing_else_does() -> None:
    assert set(runbook._ACTIONS) == set(RUNBOOK_ACTIONS)


def test_the_drain_workflow_settles_a_gpu_idle_drain_by_its_kind() -> None:
    assert spec_of(Kind.GPU_IDLE).hooks.settlement.settle is gpu_idle.settle_round
    spot = spec_of(Kind.SPOT_INTERRUPTION).hooks  # delivered beside Karpenter's own handling, settled as is
    assert spot.settlement == URGENT.settlement
    assert spot.delivery.prepare_pod is karpenter.protect_pod
    assert spot.delivery.replacement_guard is karpenter.left_to_karpenter


def test_an_involuntary_kind_starts_the_drain_workflow_at_once() -> None:
    # instance-stopping records a loss and runs no sequence (no hooks): nothing to hand off
    involuntary = [
        s.kind for s in SPECS if not s.voluntary and s.handle is not None and s.kind is not Kind.INSTANCE_STOPPING
    ]
    assert Kind.CAPACITY_RESERVATION_INTERRUPTION in involuntary
    assert all(spec_of(k).hooks.delivery.hand_off_at_once for k in involuntary)
