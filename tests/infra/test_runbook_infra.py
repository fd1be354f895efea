"""The runbook function and its SSM Automation documents in the synthesized template."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from gpuwarden.sources import parse_runbook
from infra.components.runbook_documents import DOCUMENTS, payload_template
from tests.infra.conftest import Synth

RUNBOOK_HANDLER = "gpuwarden.handlers.runbook.handler"
PARAMETERS = {"Node", "InstanceId", "Reason", "DryRun", "Force", "AutomationAssumeRole"}


def _runbook_function(synth: Synth) -> str:
    (logical_id,) = [
        k for k, r in synth.resources("AWS::Lambda::Function").items() if r["Properties"]["Handler"] == RUNBOOK_HANDLER
    ]
    return logical_id


def _documents(synth: Synth) -> list[dict[str, Any]]:
    return [r["Properties"] for r in synth.resources("AWS::SSM::Document").values()]


def _steps(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {step["name"]: step for step in document["Content"]["mainSteps"]}


def _policy_statements(synth: Synth, role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_runbook_function_is_invoked_directly_so_it_has_no_async_retries(synth: Synth) -> None:
    function_id = _runbook_function(synth)
    configs = [
        c
        for c in synth.resources("AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    assert configs == []


def test_the_runbook_function_may_start_the_drain_workflow_and_scale_node_groups(synth: Synth) -> None:
    function_id = _runbook_function(synth)
    role_id = synth.resources("AWS::Lambda::Function")[function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    actions = {
        a
        for s in _policy_statements(synth, role_id)
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert "states:StartExecution" in actions
    assert "autoscaling:SetDesiredCapacity" in actions
    env = synth.resources("AWS::Lambda::Function")[function_id]["Properties"]["Environment"]["Variables"]
    assert "GPUWARDEN_DRAIN_STATE_MACHINE_ARN" in env


def test_one_automation_document_per_runbook_action_with_the_documented_parameters(synth: Synth) -> None:
    documents = _documents(synth)
    assert len(documents) == len(DOCUMENTS) == 5
    actions = set()
    for document in documents:
        content = document["Content"]
        assert document["DocumentType"] == "Automation"
        assert content["schemaVersion"] == "0.3"
        assert content["assumeRole"] == "{{AutomationAssumeRole}}"
        assert set(content["parameters"]) >= PARAMETERS
        steps = _steps(document)
        for name in ("InvokeByNode", "InvokeByInstanceId"):
            assert steps[name]["action"] == "aws:invokeLambdaFunction"
            assert steps[name]["inputs"]["InvocationType"] == "RequestResponse"
            assert steps[name]["inputs"]["FunctionName"] == {"Fn::GetAtt": [_runbook_function(synth), "Arn"]}
        actions.add(json.loads(_render(steps["InvokeByNode"]["inputs"]["Payload"]))["action"])
    assert actions == {"drain", "cordon", "uncordon", "status", "plan"}


def test_only_the_drain_document_asks_for_approval_and_only_when_asked(synth: Synth) -> None:
    for document in _documents(synth):
        steps = _steps(document)
        is_drain = "drain" in _render(steps["InvokeByNode"]["inputs"]["Payload"])
        assert ("Approve" in steps) == is_drain
        if is_drain:
            assert steps["Approve"]["action"] == "aws:approve"
            (choice,) = steps["ApprovalWanted"]["inputs"]["Choices"]
            assert choice == {"NextStep": "Approve", "Variable": "{{RequireApproval}}", "BooleanEquals": True}
            assert steps["ApprovalWanted"]["inputs"]["Default"] == "ChooseTarget"


def test_the_automation_role_may_only_invoke_the_runbook_function(synth: Synth) -> None:
    roles = {
        k: r
        for k, r in synth.resources("AWS::IAM::Role").items()
        if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"].get("Service")
        == "ssm.amazonaws.com"
    }
    (role_id,) = roles
    statements = _policy_statements(synth, role_id)
    assert statements == [
        {
            "Action": "lambda:InvokeFunction",
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [_runbook_function(synth), "Arn"]},
            "Sid": "InvokeRunbook",
        }
    ]
    trust = roles[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]


def _render(template: str, **values: str) -> str:
    defaults = {
        "Node": "ip-10-0-1-23.us-west-2.compute.internal",
        "InstanceId": "i-0abc1234def567890",
        "DryRun": "false",
        "Force": "true",
        "Reason": "INC-4711: NVLink errors",
        "automation:EXECUTION_ID": "0123abcd-0000-1111-2222-333344445555",
    } | values
    return re.sub(r"\{\{([^}]+)\}\}", lambda m: defaults[m[1].strip()], template)


@pytest.mark.parametrize("spec", DOCUMENTS, ids=lambda s: s.action)
@pytest.mark.parametrize("target", ["node", "instance_id"])
def test_each_payload_renders_to_a_request_the_function_accepts(spec: Any, target: str) -> None:
    request = parse_runbook(json.loads(_render(payload_template(spec.action, target))))
    assert request.action == spec.action
    assert request.force is True
    assert "SSM Automation 0123abcd" in request.reason
    assert (request.node is not None) == (target == "node")
