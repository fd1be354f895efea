"""Which PodDisruptionBudget refuses a pod's eviction now (`domain.pdb.blocking_pdb`, read by
`runbook status`): the Eviction API's own rule, kube-apiserver `canIgnorePDB`
(pkg/registry/core/pod/storage/eviction.go), lets a Pending, finished or terminating pod go without
reading any budget."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuwarden.domain.pdb import PdbView, blocking_pdb
from gpuwarden.domain.views import PodView

EXHAUSTED = PdbView("ml", "trainers", selector={"matchLabels": {"app": "train"}}, disruptions_allowed=0)


def pod(phase: str, *, terminating: bool = False) -> PodView:
    return PodView(
        "ml",
        "train-0",
        "uid-0",
        "node-a",
        phase,
        labels={"app": "train"},
        deletion_timestamp=datetime(2026, 11, 29, tzinfo=UTC) if terminating else None,
    )


def test_a_running_pod_under_an_exhausted_budget_is_blocked() -> None:
    assert blocking_pdb(pod("Running"), [EXHAUSTED]) == EXHAUSTED


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_a_pod_the_eviction_api_lets_go_without_a_budget_is_never_blocked(phase: str) -> None:
    assert blocking_pdb(pod(phase), [EXHAUSTED]) is None


def test_a_terminating_pod_is_never_blocked() -> None:
    assert blocking_pdb(pod("Running", terminating=True), [EXHAUSTED]) is None


def test_started_is_the_running_phase_only() -> None:
    assert pod("Running").started
    assert not pod("Pending").started
