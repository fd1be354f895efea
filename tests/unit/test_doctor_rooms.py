"""A kind's own `gpuwarden doctor` check lives in the kind's room (`kinds/<kind>/doctor.py`, named by its
spec's `doctor`), and doctor reports it at its place in the contract's order (docs/architecture.md,
"Kinds")."""

from __future__ import annotations

from gpuwarden.kinds.registry import DOCTOR_CHECKS, SPECS
from gpuwarden.services.doctor.doctor import CLUSTER_CHECKS


def test_the_kinds_with_a_doctor_check_hold_it_in_their_rooms() -> None:
    rooms = {spec.kind.value: spec.doctor.run.__module__ for spec in SPECS if spec.doctor is not None}
    assert rooms == {
        "karpenter-expiry": "gpuwarden.kinds.karpenter_expiry.doctor",
        "gpu-unhealthy": "gpuwarden.kinds.gpu_unhealthy.doctor",
    }


def test_every_kind_check_has_one_place_in_the_contracts_order() -> None:
    names = [check.name for check in DOCTOR_CHECKS]
    assert len(set(names)) == len(names), names
    assert set(names) <= set(CLUSTER_CHECKS), set(names) - set(CLUSTER_CHECKS)
