"""The tables the services dispatch on cover what they must: the runbook's actions, the kinds' hooks."""

from __future__ import annotations

from gpuwarden.domain.notice import Kind
from gpuwarden.services import routes
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.pipeline import URGENT
from gpuwarden.services.notices import gpu_idle
from gpuwarden.services.runbook import actions as runbook
from gpuwarden.sources.runbook import RUNBOOK_ACTIONS


def test_every_runbook_action_has_its_code_and_nothing_else_does() -> None:
    assert set(runbook._ACTIONS) == set(RUNBOOK_ACTIONS)


def test_the_drain_workflow_settles_a_gpu_idle_drain_by_its_kind() -> None:
    assert routes.hooks_for(Kind.GPU_IDLE).settle is gpu_idle.settle_round
    spot = routes.hooks_for(Kind.SPOT_INTERRUPTION)  # URGENT, plus the hooks beside Karpenter's own handling
    assert spot.settle is URGENT.settle
    assert spot.prepare_pod is karpenter.protect_pod
    assert spot.replacement_guard is karpenter.left_to_karpenter


def test_an_involuntary_kind_starts_the_drain_workflow_at_once() -> None:
    involuntary = [k for k in Kind if not k.voluntary and k in routes.HOOKS]
    assert Kind.CAPACITY_RESERVATION_INTERRUPTION in involuntary
    assert all(routes.hooks_for(k).hand_off_at_once for k in involuntary)
