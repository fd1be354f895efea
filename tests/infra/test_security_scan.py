"""checkov, the independent scanner `make synth` runs: every finding fixed or acknowledged with a reason.

Each scan runs the pinned checkov from .venv-checkov (``make setup`` / ``make test`` install it)
exactly as ``make synth`` does (infra/checkov.py), on templates these tests synthesize.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs

from infra import checkov
from infra.app import build_app
from infra.components.acknowledge import AcknowledgementError, checkov_skip
from infra.components.functions import DRAIN, GPU_IDLE, INTERRUPTION, MAINTENANCE, RUNBOOK, WINDOWS
from infra.config import SKIP_BUNDLING, SettingsError
from tests.infra.conftest import FULL_CONTEXT, Synth

#: every optional feature on, and the stack's customer-managed key
KMS_CONTEXT: dict[str, Any] = {**FULL_CONTEXT, "customerManagedKey": True}
CUSTOMER_KEY_CHECKS = {"CKV_AWS_27", "CKV_AWS_119", "CKV_AWS_158", "CKV_AWS_173"}


def _scan(template: Path) -> dict[str, Any]:
    if not checkov.EXECUTABLE.exists():
        pytest.skip("checkov is not installed: run `make setup` (make test installs it)")
    proc = checkov.scan([template], output="json")
    assert proc.returncode in (0, 1), proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    report["returncode"] = proc.returncode
    return report


def _skips(template_json: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(logical id, check id) → comment, from every resource's Metadata.checkov.skip."""
    return {
        (logical_id, skip["id"]): skip["comment"]
        for logical_id, resource in template_json["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }


def _assert_clean(report: dict[str, Any], template_json: dict[str, Any]) -> None:
    summary = report["summary"]
    assert summary["resource_count"] > 50, summary  # it really scanned the stack
    assert summary["passed"] > 100, summary
    assert summary["parsing_errors"] == 0
    failed = [(r["check_id"], r["resource"]) for r in report["results"]["failed_checks"]]
    assert failed == [], "fix these or acknowledge them with checkov_skip (infra/components/acknowledge.py)"
    assert report["returncode"] == 0
    skips = _skips(template_json)
    for result in report["results"]["skipped_checks"]:
        logical_id = result["resource"].split(".", 1)[1]
        comment = skips[(logical_id, result["check_id"])]  # skipped by the template's own metadata
        assert result["check_result"]["suppress_comment"] == comment
        assert len(comment) > 40, (logical_id, comment)  # a reason a reviewer can check, not "ok"


# --------------------------------------------------------------------------- the default template (make synth)


def test_checkov_finds_every_failure_fixed_or_acknowledged_with_a_reason(synth: Synth) -> None:
    # Given the template `make synth` writes; When checkov scans it offline
    report = _scan(synth.template_path)
    # Then nothing fails, and every skip is the resource's own acknowledgement with its reason
    _assert_clean(report, synth.template_json)
    skipped = {r["check_id"] for r in report["results"]["skipped_checks"]}
    assert skipped == {"CKV_AWS_116", "CKV_AWS_117"} | CUSTOMER_KEY_CHECKS


def _network_namespaces() -> bool:
    unshare = shutil.which("unshare")
    return (
        unshare is not None
        and subprocess.run([unshare, "-rn", "true"], capture_output=True, check=False).returncode == 0
    )


def test_checkov_scans_with_no_network_at_all(synth: Synth) -> None:
    if not checkov.EXECUTABLE.exists():
        pytest.skip("checkov is not installed: run `make setup` (make test installs it)")
    if not _network_namespaces():
        pytest.skip("no unprivileged network namespaces here (unshare -rn)")
    # Given a network namespace with no interfaces; When checkov scans the template in it as make synth does
    proc = subprocess.run(
        ["unshare", "-rn", *checkov.command([synth.template_path])],
        env={**os.environ, **checkov.OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Then it scans every check and passes, needing nothing from the network
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Failed checks: 0" in proc.stdout
    assert re.search(r"Passed checks: [1-9]\d\d+", proc.stdout), proc.stdout


def test_removing_one_acknowledgement_makes_checkov_fail(synth: Synth, tmp_path: Path) -> None:
    # Given the template with the drain function's DLQ acknowledgement removed
    template = copy.deepcopy(synth.template_json)
    ((logical_id, _),) = [
        (k, v) for k, v in template["Resources"].items() if v.get("Properties", {}).get("Handler") == DRAIN.handler
    ]
    metadata = template["Resources"][logical_id]["Metadata"]["checkov"]
    metadata["skip"] = [s for s in metadata["skip"] if s["id"] != "CKV_AWS_116"]
    path = tmp_path / "one-acknowledgement-removed.template.json"
    path.write_text(json.dumps(template))
    # When checkov scans it
    report = _scan(path)
    # Then that one finding fails the scan (exit 1), and nothing else does
    failed = [(r["check_id"], r["resource"]) for r in report["results"]["failed_checks"]]
    assert failed == [("CKV_AWS_116", f"AWS::Lambda::Function.{logical_id}")]
    assert report["returncode"] == 1


def test_every_function_reserves_the_concurrency_docs_security_md_justifies(synth: Synth) -> None:
    by_handler = {
        f["Properties"]["Handler"]: f["Properties"].get("ReservedConcurrentExecutions")
        for f in synth.resources("AWS::Lambda::Function").values()
    }
    for spec in (INTERRUPTION, DRAIN, RUNBOOK, GPU_IDLE, MAINTENANCE, WINDOWS):
        assert by_handler.pop(spec.handler) == spec.reserved_concurrency, spec.name
    assert set(by_handler.values()) == {1}  # the cluster-access installer and CDK's custom-resource framework
    page = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    for spec in (INTERRUPTION, DRAIN, RUNBOOK, GPU_IDLE, MAINTENANCE, WINDOWS):
        assert f"| {spec.name} | {spec.reserved_concurrency} |" in page, spec.name


def test_the_interruption_concurrency_follows_context_interruption_concurrency(synth_with: Any) -> None:
    # Given a fleet whose largest burst is 250 nodes
    bigger: Synth = synth_with({"interruptionConcurrency": "250"})
    # Then the interruption function reserves 250 executions, and the others keep theirs
    by_handler = {
        f["Properties"]["Handler"]: f["Properties"]["ReservedConcurrentExecutions"]
        for f in bigger.resources("AWS::Lambda::Function").values()
    }
    assert by_handler[INTERRUPTION.handler] == 250
    assert by_handler[DRAIN.handler] == DRAIN.reserved_concurrency


@pytest.mark.parametrize("value", ["0", "lots", "-5", True, 10_001])
def test_a_reserved_concurrency_that_is_not_a_positive_number_fails_the_synth(value: Any) -> None:
    with pytest.raises(SettingsError, match="interruptionConcurrency"):
        build_app(context={"cluster": "ml-test", SKIP_BUNDLING: True, "interruptionConcurrency": value})


# --------------------------------------------------------------------------- context customerManagedKey=true


def test_a_customer_managed_key_encrypts_logs_table_queues_and_every_environment(synth_with: Any) -> None:
    # Given the stack synthesized with its customer-managed key (and every optional feature)
    kms_synth: Synth = synth_with(KMS_CONTEXT)
    assert kms_synth.error is None, str(kms_synth.error)  # cdk-nag included
    ((key_id, key),) = [(k, v) for k, v in kms_synth.resources("AWS::KMS::Key").items() if k.startswith("Encryption")]
    assert key["Properties"]["EnableKeyRotation"] is True
    the_key = {"Fn::GetAtt": [key_id, "Arn"]}
    # Then every store that holds gpuwarden data uses it
    for queue in kms_synth.resources("AWS::SQS::Queue").values():
        assert queue["Properties"]["KmsMasterKeyId"] == the_key
        assert "SqsManagedSseEnabled" not in queue["Properties"]
    for group in kms_synth.resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["KmsKeyId"] == the_key
    for fn in kms_synth.resources("AWS::Lambda::Function").values():
        assert fn["Properties"]["KmsKeyArn"] == the_key
    ((table),) = kms_synth.resources("AWS::DynamoDB::Table").values()
    assert table["Properties"]["SSESpecification"] == {"KMSMasterKeyId": the_key, "SSEEnabled": True, "SSEType": "KMS"}
    # and the services that write with it on gpuwarden's behalf may: CloudWatch Logs, EventBridge's DLQ
    principals = [json.dumps(s["Principal"]) for s in key["Properties"]["KeyPolicy"]["Statement"]]
    assert any("logs." in p for p in principals)
    assert any("events.amazonaws.com" in p for p in principals)


def test_with_the_customer_managed_key_checkov_needs_no_customer_key_acknowledgement(synth_with: Any) -> None:
    kms_synth: Synth = synth_with(KMS_CONTEXT)
    report = _scan(kms_synth.template_path)
    _assert_clean(report, kms_synth.template_json)
    skipped = {r["check_id"] for r in report["results"]["skipped_checks"]}
    # functions in the VPC: only CDK's custom-resource framework function stays outside it
    assert skipped == {"CKV_AWS_116", "CKV_AWS_117"}
    assert not {c for (_, c) in _skips(kms_synth.template_json)} & CUSTOMER_KEY_CHECKS


def test_without_the_key_every_store_uses_aws_keys(synth: Synth) -> None:
    # but the Alertmanager topic's own key: a service principal (aps.amazonaws.com) cannot use the
    # AWS-managed SNS key (docs/gpu-signals.md)
    assert [k for k in synth.resources("AWS::KMS::Key") if not k.startswith("GpuSignalsTopicKey")] == []
    for queue in synth.resources("AWS::SQS::Queue").values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    for fn in synth.resources("AWS::Lambda::Function").values():
        assert "KmsKeyArn" not in fn["Properties"]


# --------------------------------------------------------------------------- the helper


def test_an_acknowledgement_needs_a_reason_and_is_given_once() -> None:
    queue = sqs.Queue(Stack(App(), "Scratch"), "Queue")
    with pytest.raises(AcknowledgementError, match="reason"):
        checkov_skip(queue, "CKV_AWS_27", "fine")
    reason = "SSE-SQS encrypts it; this test only needs a reason longer than forty characters."
    checkov_skip(queue, "CKV_AWS_27", reason)
    with pytest.raises(AcknowledgementError, match="twice"):
        checkov_skip(queue, "CKV_AWS_27", reason)
    checkov_skip(queue, "CKV_AWS_999", reason)
    assert queue.node.default_child.get_metadata("checkov") == {  # type: ignore[union-attr]
        "skip": [{"id": "CKV_AWS_27", "comment": reason}, {"id": "CKV_AWS_999", "comment": reason}]
    }
