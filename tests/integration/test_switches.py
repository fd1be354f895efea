"""A behaviour switched off by name in the policy ignores its notices, naming the switch, and
writes nothing (docs/policy.md#switches); doctor prints what is on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim import KubeSim
from tests.integration.cli_subprocess import WRITES, cluster, moto_endpoint, run, sim
from tests.integration.conftest import load_event

__all__ = ["moto_endpoint", "sim"]


@pytest.mark.parametrize(
    ("sample", "switch"),
    [
        ("cloudwatch-alarm-state-change-gpu-idle.json", "gpu_idle.enabled"),
        ("rebalance-recommendation.json", "rebalance.enabled"),
        ("health-scheduled-change-nth.json", "maintenance.enabled"),
        ("capacity-block-delivered.json", "capacity_blocks.enabled"),
    ],
)
def test_a_switched_off_behaviour_ignores_its_notice_naming_the_switch(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path, sample: str, switch: str
) -> None:
    # Given a cluster and a policy with one behaviour switched off
    cluster(sim)
    section = switch.split(".")[0]
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"cluster": "ml-prod", section: {"enabled": False}}))
    before = len(sim.requests)
    # When its sample event is invoked
    completed = run(
        sim,
        moto_endpoint,
        ["invoke", "-"],
        {"GPUWARDEN_POLICY_FILE": str(policy)},
        stdin=json.dumps(load_event(sample)),
    )
    # Then it is ignored, the reason naming the switch, and nothing was written
    assert completed.returncode == 0, completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["outcome"] == "ignored", answer
    assert switch in answer["reason"]
    assert [r for r in sim.requests[before:] if r.method in WRITES] == []


def test_doctor_prints_what_is_on(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"cluster": "ml-prod", "gpu_idle": {"enabled": False}}))
    completed = run(sim, moto_endpoint, ["doctor", "--json"], {"GPUWARDEN_POLICY_FILE": str(policy)})
    findings = {f["check"]: f for f in json.loads(completed.stdout)["findings"]}
    message = findings["behaviours"]["message"]
    assert "off: gpu_idle.enabled" in message
    assert "rebalance.enabled" in message.split(";")[0]
