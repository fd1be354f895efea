"""Whose do-not-disrupt is it: the owner's protects a pod from voluntary disruption, gpuwarden's own does not."""

from __future__ import annotations

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.protections import do_not_disrupt_refusal
from gpuwarden.domain.views import DO_NOT_DISRUPT, NodeView, PodView


def pod(**annotations: str) -> PodView:
    return PodView("ml", "train-0", "uid-1", "node-a", "Running", annotations=annotations)


def test_the_owners_do_not_disrupt_refuses_a_voluntary_disruption() -> None:
    assert pod(**{DO_NOT_DISRUPT: "true"}).do_not_disrupt
    assert do_not_disrupt_refusal(Kind.GPU_IDLE, NodeView("node-a", "1"), [pod(**{DO_NOT_DISRUPT: "true"})]) is not None


def test_a_do_not_disrupt_gpuwarden_added_for_an_interruption_is_not_the_owners() -> None:
    marked = pod(**{DO_NOT_DISRUPT: "true", ann.DO_NOT_DISRUPT_ADDED: "spot-event-1"})
    assert not marked.do_not_disrupt
    assert do_not_disrupt_refusal(Kind.GPU_IDLE, NodeView("node-a", "1"), [marked]) is None
