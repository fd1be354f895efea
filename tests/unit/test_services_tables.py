"""The tables the services dispatch on cover what they must: the runbook's actions, the kinds' hooks."""

from __future__ import annotations

from gpuwarden.domain.notice import Kind
from gpuwarden.services import gpu_idle, kinds, runbook
from gpuwarden.services.pipeline import URGENT
from gpuwarden.sources.runbook import RUNBOOK_ACTIONS


def test_every_runbook_action_has_its_code_and_nothing_else_does() -> None:
    assert set(runbook._ACTIONS) == set(RUNBOOK_ACTIONS)


def test_the_drain_workflow_settles_a_gpu_idle_drain_by_its_kind() -> None:
    assert kinds.hooks_for(Kind.GPU_IDLE).settle is gpu_idle.settle_round
    assert kinds.hooks_for(Kind.SPOT_INTERRUPTION) is URGENT


def test_an_involuntary_kind_starts_the_drain_workflow_at_once() -> None:
    involuntary = [k for k in Kind if not k.voluntary and k in kinds.HOOKS]
    assert Kind.CAPACITY_RESERVATION_INTERRUPTION in involuntary
    assert all(kinds.hooks_for(k).hand_off_at_once for k in involuntary)
