"""docs/permissions.md, generated from what the stack and the RBAC are built from: the IAM
statements of the synthesized stack (every optional feature on) and the RBAC table
(`gpuwarden.services.doctor.rbac.RULES`). ``python -m infra.permissions > docs/permissions.md``;
tests/infra/test_permissions_page.py fails when the page and the stack drift apart, or when an
IAM action has no reason below.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections import defaultdict
from typing import Any

#: Why each IAM action may be called. A new action in the stack without a reason here fails the test.
WHY: dict[str, str] = {
    "autoscaling:DescribeAutoScalingGroups": "find the Auto Scaling group of a node outside Karpenter (replacement)",
    "autoscaling:DescribeAutoScalingInstances": "which group an instance belongs to (replacement)",
    "autoscaling:SetDesiredCapacity": "raise a node group's desired count by one: replacement capacity before the drain",  # noqa: E501
    "autoscaling:TerminateInstanceInAutoScalingGroup": "retire an idle GPU node of a node group (GPU-idle reclaim)",
    "cloudwatch:GetMetricData": "read a node's GPU utilization before reclaiming it (GPU-idle)",
    "dynamodb:BatchGetItem": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:BatchWriteItem": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:ConditionCheckItem": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:DeleteItem": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:DescribeTable": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:GetItem": "the action ledger: a duplicate delivery is recognised",
    "dynamodb:GetRecords": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:GetShardIterator": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:PutItem": "the action ledger: what was done, by whom, why",
    "dynamodb:Query": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:Scan": "the action ledger and window state (CDK grantReadWriteData)",
    "dynamodb:UpdateItem": "the action ledger: duplicate counts, outcomes",
    "ec2:CreateFleet": "replacement capacity for a node outside Karpenter and node groups (only with a fleet launch template)",  # noqa: E501
    "ec2:CreateTags": "tag the instances EC2 Fleet launches (only with a fleet launch template)",
    "ec2:DescribeCapacityReservations": "Capacity Block end dates: plan the drain before EC2 terminates",
    "ec2:DescribeInstances": "instance id to node name, instance type, Capacity Reservation",
    "ec2:RunInstances": "EC2 Fleet launches instances with the caller's rights (only with a fleet launch template)",
    "eks:DescribeCluster": "the cluster endpoint and CA for the function's Kubernetes client",
    "iam:PassRole": "pass the fleet launch template's instance role to EC2 (only with fleetRoleArn)",
    "lambda:GetFunction": "the RBAC installer (deploy time) and the SSM runbook documents",
    "lambda:InvokeFunction": "Scheduler ticks invoke the scheduled function; SSM runbook documents invoke the runbook function",  # noqa: E501
    "logs:CreateLogDelivery": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:CreateLogStream": "the functions' logs",
    "logs:DeleteLogDelivery": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:DescribeLogGroups": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:DescribeResourcePolicies": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:GetLogDelivery": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:ListLogDeliveries": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:PutLogEvents": "the functions' logs",
    "logs:PutResourcePolicy": "the drain workflow's execution logs (Step Functions log delivery)",
    "logs:UpdateLogDelivery": "the drain workflow's execution logs (Step Functions log delivery)",
    "scheduler:CreateSchedule": "one-time schedules: a maintenance or Capacity Block drain falling due",
    "scheduler:GetSchedule": "a one-time schedule already made is not made twice",
    "sqs:GetQueueAttributes": "dead-letter queues (CDK grants)",
    "sqs:GetQueueUrl": "dead-letter queues (CDK grants)",
    "sqs:SendMessage": "an event that failed after its retries goes to a dead-letter queue",
    "ssm:DescribeParameters": "the policy parameter (CDK grantRead)",
    "ssm:GetParameter": "the policy document",
    "ssm:GetParameterHistory": "the policy parameter (CDK grantRead)",
    "ssm:GetParameters": "the policy parameter (CDK grantRead)",
    "states:StartExecution": "hand a long drain to the drain workflow",
    "xray:GetSamplingRules": "X-Ray tracing of the functions",
    "xray:GetSamplingTargets": "X-Ray tracing of the functions",
    "xray:PutTelemetryRecords": "X-Ray tracing of the functions",
    "xray:PutTraceSegments": "X-Ray tracing of the functions",
}

#: The context the page is synthesized with: every optional permission present.
CONTEXT: dict[str, Any] = {
    "cluster": "ml-prod",
    "gpuwardenSkipBundling": True,
    "fleetRoleArn": "arn:aws:iam::123456789012:role/gpu-nodes",
    "policy": {"replacement": {"fleet_launch_template": "lt-0123456789abcdef0"}},
}

SUPPORTED = """## Supported versions

| component | versions |
|---|---|
| Karpenter | 1.x (the `karpenter.sh/v1` NodePool and NodeClaim API); v1beta1 (0.3x) is not supported |
| EKS / Kubernetes | 1.29 and later, with access entries (authentication mode `API` or \
`API_AND_CONFIG_MAP`); `pods/exec` is granted both `get` and `create` for 1.35's WebSocket check |
| Python | 3.11 and later for the command line; the functions run on the Lambda Python 3.13 runtime |
"""


def _show(value: Any) -> str:
    """A CloudFormation value, short: Ref and GetAtt by name, Join joined, pseudo parameters as ${…}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "Ref" in value:
            ref = str(value["Ref"])
            return "${" + ref + "}" if ref.startswith("AWS::") else ref
        if "Fn::GetAtt" in value:
            return ".".join(str(v) for v in value["Fn::GetAtt"])
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            return str(sep).join(_show(p) for p in parts)
    return json.dumps(value, sort_keys=True)


def _role_of(resources: dict[str, Any], policy: dict[str, Any]) -> str:
    roles = policy["Properties"].get("Roles") or []
    return ", ".join(_show(r) for r in roles) or "?"


def iam_rows(template: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(action, why, role(s), resource(s)) for every IAM action of the stack's inline policies."""
    grouped: dict[tuple[str, str], set[str]] = defaultdict(set)
    resources = template["Resources"]
    for policy in resources.values():
        if policy["Type"] != "AWS::IAM::Policy":
            continue
        role = _role_of(resources, policy)
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            for action in [actions] if isinstance(actions, str) else actions:
                targets = statement.get("Resource", "*")
                condition = statement.get("Condition")
                where = f" when {json.dumps(condition, sort_keys=True, default=str)}" if condition else ""
                for target in targets if isinstance(targets, list) else [targets]:
                    grouped[(action, _show(target) + where)].add(role)
    rows = []
    for (action, target), roles in sorted(grouped.items()):
        rows.append((action, WHY.get(action, "MISSING: add a reason in infra/permissions.py"), target, len(roles)))
    return [(a, w, t, f"{n} role(s)") for a, w, t, n in rows]


def synthesized_template() -> dict[str, Any]:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from infra.app import STACK_NAME, build_app

    with tempfile.TemporaryDirectory() as out:
        app = build_app(outdir=out, context=CONTEXT)
        with contextlib.suppress(RuntimeError):  # cdk-nag findings: the template is written all the same
            app.synth()
        with open(os.path.join(out, f"{STACK_NAME}.template.json"), encoding="utf-8") as handle:
            template: dict[str, Any] = json.load(handle)
    return template


def render(template: dict[str, Any]) -> str:
    from gpuwarden.services.doctor.rbac import RULES

    lines = [
        "# Permissions",
        "",
        "Generated by `python -m infra.permissions > docs/permissions.md` from the synthesized stack (every",
        "optional feature on: a fleet launch template and `fleetRoleArn`) and the RBAC table",
        "(`functions/gpuwarden/services/doctor/rbac.py`); `tests/infra/test_permissions_page.py` fails when",
        "they drift. Do not edit by hand.",
        "",
        "## Kubernetes (ClusterRole `gpuwarden`, bound to the group every function role is mapped to)",
        "",
        "| API group | resource | verbs | why |",
        "|---|---|---|---|",
    ]
    for rule in RULES:
        group = rule.api_group or "(core)"
        only = " (only when `checkpoint.allow_exec` is true)" if rule.exec_only else ""
        lines.append(f"| {group} | `{rule.resource}` | {', '.join(rule.verbs)} | {rule.why}{only} |")
    lines += [
        "",
        "## AWS IAM (the stack's inline policies; no managed policies)",
        "",
        "| action | why | resource | granted to |",
        "|---|---|---|---|",
    ]
    for action, why, target, roles in iam_rows(template):
        lines.append(f"| `{action}` | {why} | `{target.replace('|', '/')}` | {roles} |")
    lines += ["", SUPPORTED.rstrip(), ""]
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render(synthesized_template()))


if __name__ == "__main__":
    main()
