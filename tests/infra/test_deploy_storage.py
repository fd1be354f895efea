"""Encryption and retention everywhere: table, queues, topic, logs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.conftest import FULL_CONTEXT, Synth


@pytest.fixture(params=["default", "full"])
def any_synth(request: pytest.FixtureRequest, synth: Synth, synth_with: Any) -> Synth:
    return synth if request.param == "default" else synth_with(FULL_CONTEXT)


def test_state_table_is_encrypted_with_pitr_and_the_ledger_ttl(any_synth: Synth) -> None:
    from gpuwarden.adapters.ledger import LEDGER_TTL_DAYS

    (table,) = any_synth.resources("AWS::DynamoDB::Table").values()
    props = table["Properties"]
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["DeletionPolicy"] == "Retain"
    assert LEDGER_TTL_DAYS > 0  # the ledger writes expires_at


def test_every_queue_is_encrypted(any_synth: Synth) -> None:
    queues = any_synth.resources("AWS::SQS::Queue").values()
    assert queues
    for queue in queues:
        props = queue["Properties"]
        assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props


def test_every_log_group_has_a_retention_and_every_function_logs_to_one(any_synth: Synth) -> None:
    log_groups = any_synth.resources("AWS::Logs::LogGroup")
    for log_group in log_groups.values():
        assert log_group["Properties"]["RetentionInDays"] > 0
    for logical_id, fn in any_synth.resources("AWS::Lambda::Function").items():
        target = fn["Properties"].get("LoggingConfig", {}).get("LogGroup", {})
        assert target.get("Ref") in log_groups, f"{logical_id} logs to a log group without retention"
    assert not any_synth.resources("Custom::LogRetention")


def test_every_topic_and_key_is_encrypted_and_rotated(synth_with: Any) -> None:
    synth = synth_with(FULL_CONTEXT)
    for topic in synth.resources("AWS::SNS::Topic").values():
        assert "KmsMasterKeyId" in topic["Properties"]
    for key in synth.resources("AWS::KMS::Key").values():
        assert key["Properties"]["EnableKeyRotation"] is True


def test_full_deployment_passes_cfn_lint(synth_with: Any) -> None:
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    synth = synth_with(FULL_CONTEXT)
    cfn_lint = shutil.which("cfn-lint") or str(Path(sys.executable).with_name("cfn-lint"))
    proc = subprocess.run(
        [cfn_lint, "--ignore-checks", "W3005", "--", str(synth.template_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
