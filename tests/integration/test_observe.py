"""Observe mode (`cdk deploy -c mode=observe`, GPUWARDEN_MODE=observe): every sample event is
planned and answered, and nothing is written to the cluster but the Kubernetes Events of what
would have happened ("Would…" reasons); nothing to EC2 either (docs/rollback.md#observe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim import KubeSim
from sim.scenes.base import build_cluster

EVENTS = sorted((Path(__file__).resolve().parents[2] / "events").glob("*.json"))
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@pytest.mark.parametrize("sample", EVENTS, ids=[p.stem for p in EVENTS])
def test_observe_mode_changes_nothing_on_the_cluster_for_every_sample_event(
    sim: KubeSim, aws: None, monkeypatch: pytest.MonkeyPatch, sample: Path
) -> None:
    from gpuwarden.local import run_event

    # Given the demo's cluster, and gpuwarden deployed in observe mode
    build_cluster(sim)
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig_path))
    monkeypatch.setenv("GPUWARDEN_CLUSTER", "ml-prod")
    monkeypatch.setenv("GPUWARDEN_MODE", "observe")
    monkeypatch.setenv("GPUWARDEN_NOW", "2026-06-01T12:00:00Z")
    before = len(sim.requests)
    # When the sample event is handled as deployed
    result = run_event(json.loads(sample.read_text()))
    # Then it is answered (never a failure of the observe mode itself)
    assert result["outcome"] in ("dry-run", "ignored", "duplicate", "handled", "failed"), result
    if result["outcome"] == "failed":
        assert "not a node" in result["reason"] or "not found" in result["reason"], result
    # And the only writes are Events whose reason says what would have happened
    writes = [r for r in sim.requests[before:] if r.method in WRITES]
    for write in writes:
        assert write.method == "POST", write.path
        assert write.path.endswith("/events"), write.path
        assert json.loads(write.body)["reason"].startswith("Would"), write.body
    # And when it acts on a node of the cluster, the Events say so
    if result["outcome"] == "dry-run" and result.get("node") and result.get("actions"):
        assert writes, "observe mode posts the Events of what would have happened"
