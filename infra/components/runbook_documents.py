"""SSM Automation documents for the on-call runbook (docs/cli.md): drain, cordon, uncordon,
status and plan of one node, each a synchronous invoke of the runbook function.

Parameters: Node | InstanceId (exactly one; validated here by pattern and again by the
function), Reason, DryRun, Force, AutomationAssumeRole (default: a role that may only invoke
the runbook function). The drain document can ask for approval first (RequireApproval +
Approvers, an `aws:approve` step). The SSM execution id goes into the request's reason, so
the ledger entry points at the execution (whose record names the IAM principal who started it).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

#: A node name (RFC 1123 subdomain) or empty; an instance id or empty.
NODE_PATTERN = r"^$|^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
INSTANCE_PATTERN = r"^$|^i-[0-9a-f]{8,17}$"
#: The reason is written into a JSON string: no quote, backslash or control character.
REASON_PATTERN = r"^[^\"\\\u0000-\u001f]{0,900}$"


@dataclass(frozen=True)
class RunbookDocumentSpec:
    construct_id: str
    action: str
    description: str
    approval: bool = False


DOCUMENTS = (
    RunbookDocumentSpec(
        "DrainNode", "drain", "Cordon, checkpoint and drain one GPU node (PDBs are never overridden)", True
    ),
    RunbookDocumentSpec("CordonNode", "cordon", "Cordon and taint one GPU node (gpuwarden.io/disruption=manual)"),
    RunbookDocumentSpec("UncordonNode", "uncordon", "Undo gpuwarden's taint, cordon and annotations on one node"),
    RunbookDocumentSpec("NodeStatus", "status", "What gpuwarden knows of one node (changes nothing)"),
    RunbookDocumentSpec("PlanDrain", "plan", "What a drain of one node would do to every pod now (changes nothing)"),
)


def payload_template(action: str, target: str) -> str:
    """The runbook payload with SSM's {{parameters}}; valid JSON once they are substituted."""
    key, parameter = ("node", "Node") if target == "node" else ("instance_id", "InstanceId")
    return (
        f'{{"action": "{action}", "{key}": "{{{{{parameter}}}}}", "dry_run": {{{{DryRun}}}}, '
        '"force": {{Force}}, "reason": "{{Reason}} (SSM Automation {{automation:EXECUTION_ID}})"}'
    )


def _parameters(role_arn: str, approval: bool) -> dict[str, Any]:
    parameters: dict[str, Any] = {
        "Node": {"type": "String", "default": "", "allowedPattern": NODE_PATTERN, "description": "Node name"},
        "InstanceId": {
            "type": "String",
            "default": "",
            "allowedPattern": INSTANCE_PATTERN,
            "description": "EC2 instance id (instead of Node)",
        },
        "Reason": {
            "type": "String",
            "default": "",
            "allowedPattern": REASON_PATTERN,
            "description": "Why (ticket, incident): written to the ledger and the node's Events",
        },
        "DryRun": {"type": "Boolean", "default": False, "description": "Plan and report, change nothing"},
        "Force": {
            "type": "Boolean",
            "default": False,
            "description": "Override budget windows and karpenter.sh/do-not-disrupt (never a PDB)",
        },
        "AutomationAssumeRole": {
            "type": "String",
            "default": role_arn,
            "description": "The role the automation runs as (default: may only invoke the runbook function)",
        },
    }
    if approval:
        parameters["RequireApproval"] = {"type": "Boolean", "default": False, "description": "Ask Approvers first"}
        parameters["Approvers"] = {
            "type": "StringList",
            "default": ["none"],
            "description": "IAM users/roles/groups that may approve (with RequireApproval)",
        }
    return parameters


def _invoke(name: str, action: str, target: str, function_arn: str, caller: str) -> dict[str, Any]:
    context = base64.b64encode(json.dumps({"custom": {"caller": caller}}).encode()).decode()
    return {
        "name": name,
        "action": "aws:invokeLambdaFunction",
        "isEnd": True,
        "inputs": {
            "FunctionName": function_arn,
            "InvocationType": "RequestResponse",
            "ClientContext": context,
            "Payload": payload_template(action, target),
        },
    }


def document_content(spec: RunbookDocumentSpec, function_arn: str, role_arn: str) -> dict[str, Any]:
    caller = f"ssm-automation:gpuwarden-{spec.action}"
    steps: list[dict[str, Any]] = []
    if spec.approval:
        steps += [
            {
                "name": "ApprovalWanted",
                "action": "aws:branch",
                "inputs": {
                    "Choices": [{"NextStep": "Approve", "Variable": "{{RequireApproval}}", "BooleanEquals": True}],
                    "Default": "ChooseTarget",
                },
            },
            {
                "name": "Approve",
                "action": "aws:approve",
                "timeoutSeconds": 3600,
                "onFailure": "Abort",
                "inputs": {
                    "Approvers": "{{Approvers}}",
                    "MinRequiredApprovals": 1,
                    "Message": f"gpuwarden {spec.action} of {{{{Node}}}}{{{{InstanceId}}}}: {{{{Reason}}}}",
                },
                "nextStep": "ChooseTarget",
            },
        ]
    steps += [
        {
            "name": "ChooseTarget",
            "action": "aws:branch",
            "inputs": {
                "Choices": [
                    {"NextStep": "InvokeByInstanceId", "Not": {"Variable": "{{InstanceId}}", "StringEquals": ""}}
                ],
                "Default": "InvokeByNode",
            },
        },
        _invoke("InvokeByNode", spec.action, "node", function_arn, caller),
        _invoke("InvokeByInstanceId", spec.action, "instance_id", function_arn, caller),
    ]
    return {
        "schemaVersion": "0.3",
        "description": f"gpuwarden: {spec.description}. Give Node or InstanceId.",
        "assumeRole": "{{AutomationAssumeRole}}",
        "parameters": _parameters(role_arn, spec.approval),
        "mainSteps": steps,
        "outputs": ["InvokeByNode.Payload", "InvokeByInstanceId.Payload"],
    }


class RunbookDocuments(Construct):
    """The Automation documents and the one role they run as by default."""

    def __init__(self, scope: Construct, construct_id: str, *, function: lambda_.IFunction) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "AutomationRole",
            assumed_by=iam.ServicePrincipal(
                "ssm.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": stack.format_arn(service="ssm", resource="automation-execution/*")},
                },
            ),
            description="gpuwarden runbook SSM Automation: may only invoke the runbook function",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="InvokeRunbook", actions=["lambda:InvokeFunction"], resources=[function.function_arn]
            )
        )
        self.documents: dict[str, ssm.CfnDocument] = {}
        for spec in DOCUMENTS:
            document = ssm.CfnDocument(
                self,
                spec.construct_id,
                document_type="Automation",
                document_format="JSON",
                content=document_content(spec, function.function_arn, self.role.role_arn),
            )
            self.documents[spec.action] = document
            CfnOutput(scope, f"Runbook{spec.construct_id}Document", value=document.ref)
