"""The one table of protections (gpuwarden/domain/protections.py, docs/protections.md): every kind has
its row, the kinds' specs agree with it, the docs show it, and the drain reads it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuwarden.domain import annotations as ann
from gpuwarden.domain import protections
from gpuwarden.domain.drain import DrainContext, decide_pod, on_eviction_blocked
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.protections import Holds
from gpuwarden.domain.views import DO_NOT_DISRUPT, NodeView, PodView
from gpuwarden.kinds.registry import SPECS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protections.md"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
EXPIRY = NOW + timedelta(minutes=20)


def pod(annotations: dict[str, str] | None = None, grace: int = 300) -> PodView:
    notes = annotations or {}
    return PodView("ml", "long-training-job", "u1", "n1", "Running", annotations=notes, grace_seconds=grace)


def expiry(now: datetime = NOW, forced_at: datetime | None = None) -> DrainContext:
    return DrainContext(
        "evt", True, EXPIRY, now, kind=Kind.KARPENTER_EXPIRY, forced_at=forced_at, notice_time=NOW - timedelta(1)
    )


def test_every_kind_has_one_row_and_the_docs_show_the_table() -> None:
    assert set(protections.TABLE) == set(Kind)
    page = DOCS.read_text(encoding="utf-8")
    assert protections.table_markdown() in page, "docs/protections.md does not show today's table"


def test_the_kinds_voluntary_flag_is_the_tables_pdb_rule() -> None:
    # a voluntary kind never overrides a PDB; an involuntary one yields only at its (or Karpenter's) deadline
    for spec in SPECS:
        row = protections.of(spec.kind)
        if row.pdb is Holds.NOTHING_TAKEN:
            continue
        assert spec.voluntary == (row.pdb is Holds.ALWAYS), spec.kind


def test_do_not_disrupt_refuses_the_voluntary_kinds_and_not_the_loss_warnings() -> None:
    node, pods = NodeView("n1", "1"), [pod({DO_NOT_DISRUPT: "true"})]
    for kind in (Kind.GPU_IDLE, Kind.REBALANCE, Kind.SCHEDULED_MAINTENANCE, Kind.MANUAL):
        assert protections.do_not_disrupt_refusal(kind, node, pods) is not None, kind
    assert protections.do_not_disrupt_refusal(Kind.MANUAL, node, pods, force=True) is None
    for kind in (Kind.SPOT_INTERRUPTION, Kind.KARPENTER_EXPIRY, Kind.GPU_UNHEALTHY):
        assert protections.do_not_disrupt_refusal(kind, node, pods) is None, kind


def test_an_expiry_leaves_the_owners_do_not_disrupt_pod_and_takes_gpuwardens_own_mark() -> None:
    owners = decide_pod(pod({DO_NOT_DISRUPT: "true"}), expiry())
    assert owners.step == "skip"
    assert "left to Karpenter" in owners.reason
    marked = decide_pod(pod({DO_NOT_DISRUPT: "true", ann.DO_NOT_DISRUPT_ADDED: "evt"}), expiry())
    assert marked.step == "evict"
    # a loss warning takes it: the instance goes at the deadline
    spot = DrainContext("evt", True, EXPIRY, NOW, kind=Kind.SPOT_INTERRUPTION)
    assert decide_pod(pod({DO_NOT_DISRUPT: "true"}), spot).step == "evict"


def test_an_opted_in_do_not_disrupt_pod_is_asked_to_checkpoint_then_left() -> None:
    opted = {DO_NOT_DISRUPT: "true", ann.CHECKPOINT: "annotate"}
    assert decide_pod(pod(opted), expiry()).step == "signal"
    done = opted | {
        ann.CHECKPOINT_EVENT: "evt",
        ann.CHECKPOINT_REQUESTED: ann.rfc3339(NOW + timedelta(minutes=1)),
        ann.CHECKPOINT_DONE: ann.rfc3339(NOW),
    }
    assert decide_pod(pod(done), expiry()).step == "skip"


def test_a_pdb_holds_on_an_expiry_until_karpenter_forces_the_pod() -> None:
    blocked = pod(grace=300)
    # no terminationGracePeriod: never deleted, however late
    assert on_eviction_blocked(blocked, expiry(EXPIRY + timedelta(hours=5)), "PDB").step == "wait"
    forced = EXPIRY + timedelta(hours=1)
    # with one: deleted only from Karpenter's forced moment - the pod's grace (needsForceDelete)
    assert on_eviction_blocked(blocked, expiry(forced - timedelta(seconds=301), forced), "PDB").step == "wait"
    late = on_eviction_blocked(blocked, expiry(forced - timedelta(seconds=300), forced), "PDB")
    assert late.step == "delete"
    assert late.grace_seconds is not None
    assert late.grace_seconds <= 300
