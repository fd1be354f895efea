"""What the synthesized GpuwardenStack template promises (one synth per session: conftest.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from infra.app import STACK_NAME
from tests.infra.conftest import Synth, iam_statements

INTERRUPTION_HANDLER = "gpuwarden.handlers.interruption.handler"
DRAIN_HANDLER = "gpuwarden.handlers.drain.handler"
RUNBOOK_HANDLER = "gpuwarden.handlers.runbook.handler"

#: every IAM action allowed on Resource "*", and why AWS leaves no narrower choice
STAR_RESOURCE_ACTIONS = {
    "xray:PutTraceSegments": "X-Ray has no resource-level permissions (tracing on functions and the state machine)",
    "xray:PutTelemetryRecords": "X-Ray has no resource-level permissions",
    "xray:GetSamplingRules": "X-Ray has no resource-level permissions",
    "ec2:DescribeCapacityReservations": "EC2 Describe* actions have no resource-level permissions (Capacity Blocks)",
    "xray:GetSamplingTargets": "X-Ray has no resource-level permissions",
    "logs:CreateLogDelivery": "Step Functions log delivery APIs have no resource-level permissions",
    "logs:GetLogDelivery": "idem",
    "logs:UpdateLogDelivery": "idem",
    "logs:DeleteLogDelivery": "idem",
    "logs:ListLogDeliveries": "idem",
    "logs:PutResourcePolicy": "idem (vended-logs resource policy for the state machine's log group)",
    "logs:DescribeResourcePolicies": "idem",
    "logs:DescribeLogGroups": "idem",
    "ec2:DescribeInstances": "Describe* actions do not support resource-level permissions",
    "autoscaling:DescribeAutoScalingGroups": "Describe* actions do not support resource-level permissions",
    "autoscaling:DescribeAutoScalingInstances": "Describe* actions do not support resource-level permissions",
    "cloudwatch:GetMetricData": "GetMetricData has no resource-level permissions (GPU-idle re-check)",
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _function(synth: Synth, handler: str) -> tuple[str, dict[str, Any]]:
    matches = [
        (logical_id, resource["Properties"])
        for logical_id, resource in synth.resources("AWS::Lambda::Function").items()
        if resource["Properties"]["Handler"] == handler
    ]
    assert len(matches) == 1, f"expected one function with handler {handler}"
    return matches[0]


def _rule_with_detail_type(synth: Synth, detail_type: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        r["Properties"]
        for r in synth.resources("AWS::Events::Rule").values()
        if r["Properties"]["EventPattern"]["detail-type"] == [detail_type]
    ]
    assert len(rules) == 1
    return rules[0]


# --------------------------------------------------------------------------- functions


def test_the_interruption_drain_and_runbook_functions_are_deployed(synth: Synth) -> None:
    handlers = sorted(r["Properties"]["Handler"] for r in synth.resources("AWS::Lambda::Function").values())
    assert {DRAIN_HANDLER, INTERRUPTION_HANDLER, RUNBOOK_HANDLER} <= set(handlers)


@pytest.mark.parametrize("handler", [INTERRUPTION_HANDLER, DRAIN_HANDLER])
def test_functions_run_python_313_with_the_layer_tracing_and_powertools_env(synth: Synth, handler: str) -> None:
    _, props = _function(synth, handler)
    (layer_id,) = synth.resources("AWS::Lambda::LayerVersion")
    assert props["Runtime"] == "python3.13"
    assert props["Layers"] == [{"Ref": layer_id}]
    assert props["MemorySize"] == 256
    assert props["Timeout"] == 300
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["Architectures"] == ["x86_64"]
    env = props["Environment"]["Variables"]
    assert env["GPUWARDEN_CLUSTER"] == "ml-test"
    assert env["POWERTOOLS_SERVICE_NAME"] == "gpuwarden"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Gpuwarden"
    assert env["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"
    (table_id,) = synth.resources("AWS::DynamoDB::Table")
    (param_id,) = synth.resources("AWS::SSM::Parameter")
    assert env["GPUWARDEN_STATE_TABLE"] == {"Ref": table_id}
    assert env["GPUWARDEN_POLICY_PARAMETER"] == {"Ref": param_id}


def test_layer_is_for_python_313(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::Lambda::LayerVersion",
        {"CompatibleRuntimes": ["python3.13"], "CompatibleArchitectures": ["x86_64"]},
    )


def test_interruption_function_starts_the_drain_and_has_reserved_concurrency(synth: Synth) -> None:
    _, props = _function(synth, INTERRUPTION_HANDLER)
    (sm_id,) = synth.resources("AWS::StepFunctions::StateMachine")
    assert props["ReservedConcurrentExecutions"] == 100  # docs/security.md: one per node of a 100-node burst
    assert props["Environment"]["Variables"]["GPUWARDEN_DRAIN_STATE_MACHINE_ARN"] == {"Ref": sm_id}
    synth.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Action": "states:StartExecution", "Effect": "Allow", "Resource": {"Ref": sm_id}}
                        )
                    ]
                )
            }
        },
    )


def test_each_function_has_its_own_role_and_a_one_month_log_group(synth: Synth) -> None:
    functions = synth.resources("AWS::Lambda::Function").values()
    roles = {json.dumps(f["Properties"]["Role"]) for f in functions}
    assert len(roles) == len(functions)
    log_groups = synth.resources("AWS::Logs::LogGroup")
    for fn in functions:
        log_group_id = fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert log_groups[log_group_id]["Properties"]["RetentionInDays"] == 30
    for role in synth.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]


# --------------------------------------------------------------------------- event rules


@pytest.mark.parametrize(
    ("detail_type", "pattern"),
    [
        (
            "EC2 Spot Instance Interruption Warning",
            {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
        ),
        (
            "EC2 Instance Rebalance Recommendation",
            {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
        ),
        (
            "EC2 Instance State-change Notification",
            {
                "source": ["aws.ec2"],
                "detail-type": ["EC2 Instance State-change Notification"],
                "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]},
            },
        ),
    ],
)
def test_ec2_rules_match_exactly_and_deliver_with_retries_and_a_dlq(
    synth: Synth, detail_type: str, pattern: dict[str, Any]
) -> None:
    rule = _rule_with_detail_type(synth, detail_type)
    fn_id, _ = _function(synth, INTERRUPTION_HANDLER)
    assert rule["EventPattern"] == pattern
    assert rule["State"] == "ENABLED"
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [fn_id, "Arn"]}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600}
    dlq_id = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert synth.template_json["Resources"][dlq_id]["Type"] == "AWS::SQS::Queue"


def test_exactly_the_documented_rules(synth: Synth) -> None:
    detail_types = sorted(
        r["Properties"]["EventPattern"]["detail-type"][0] for r in synth.resources("AWS::Events::Rule").values()
    )
    assert detail_types == [
        "AWS Health Event",
        "Capacity Block Delivered",
        "Capacity Block Expiration Warning",
        "CloudWatch Alarm Contributor State Change",
        "CloudWatch Alarm State Change",
        "EC2 Capacity Reservation Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "EC2 Spot Instance Interruption Warning",
    ]


# --------------------------------------------------------------------------- drain workflow


def _definition(synth: Synth) -> tuple[dict[str, Any], dict[str, Any]]:
    (sm,) = synth.resources("AWS::StepFunctions::StateMachine").values()
    parts = sm["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else '"ARN"' for p in parts).replace('""ARN""', '"ARN"')
    return sm["Properties"], json.loads(text)


def test_drain_state_machine_loops_drain_step_until_done(synth: Synth) -> None:
    props, definition = _definition(synth)
    states = definition["States"]
    assert props["StateMachineType"] == "STANDARD"
    assert definition["TimeoutSeconds"] == 6 * 3600
    step = states[definition["StartAt"]]
    assert step["Type"] == "Task"
    retried = {e for r in step["Retry"] for e in r["ErrorEquals"]}
    assert {"Lambda.ServiceException", "Lambda.TooManyRequestsException"} <= retried
    choice = states[step["Next"]]
    assert choice["Type"] == "Choice"
    (when_done,) = choice["Choices"]
    assert when_done["Variable"] == "$.done"
    assert when_done["BooleanEquals"] is True
    assert states[when_done["Next"]]["Type"] == "Succeed"
    wait = states[choice["Default"]]
    assert wait == {"Type": "Wait", "SecondsPath": "$.wait_seconds", "Next": definition["StartAt"]}


def test_drain_state_machine_invokes_the_drain_function_and_logs_and_traces(synth: Synth) -> None:
    props, _ = _definition(synth)
    drain_id, _ = _function(synth, DRAIN_HANDLER)
    (sm,) = synth.resources("AWS::StepFunctions::StateMachine").values()
    assert {"Fn::GetAtt": [drain_id, "Arn"]} in sm["Properties"]["DefinitionString"]["Fn::Join"][1]
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] in {"ALL", "ERROR"}


# --------------------------------------------------------------------------- table, queues, alarms


def test_state_table_is_on_demand_with_pitr_ttl_sse_and_retained(synth: Synth) -> None:
    synth.template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "BillingMode": "PAY_PER_REQUEST",
                    "KeySchema": [
                        {"AttributeName": "pk", "KeyType": "HASH"},
                        {"AttributeName": "sk", "KeyType": "RANGE"},
                    ],
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                    "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
                    "SSESpecification": {"SSEEnabled": True},
                }
            ),
        },
    )


def test_policy_parameter_defaults_to_the_cluster(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::SSM::Parameter", {"Type": "String", "Value": json.dumps({"cluster": "ml-test"}, separators=(",", ":"))}
    )


def test_every_queue_is_encrypted_tls_only_and_alarmed_when_not_empty(synth: Synth) -> None:
    queues = synth.resources("AWS::SQS::Queue")
    # one on-failure queue per asynchronously invoked function, the EventBridge and the Scheduler target
    # DLQs, and the GPU-health scan's undelivered ticks
    assert len(queues) == len(synth.resources("AWS::Lambda::EventInvokeConfig")) + 3
    policies = synth.resources("AWS::SQS::QueuePolicy").values()
    alarms = synth.resources("AWS::CloudWatch::Alarm").values()
    for queue_id, queue in queues.items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
        denies_plain_http = any(
            st["Effect"] == "Deny"
            and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            and {"Fn::GetAtt": [queue_id, "Arn"]} in _as_list(st["Resource"])
            for p in policies
            for st in p["Properties"]["PolicyDocument"]["Statement"]
        )
        assert denies_plain_http, queue_id
        alarmed = [
            a["Properties"]
            for a in alarms
            if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
            and a["Properties"]["Dimensions"]
            == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
        ]
        assert len(alarmed) == 1, queue_id
        assert alarmed[0]["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarmed[0]["Threshold"] == 0


# --------------------------------------------------------------------------- IAM, cdk-nag, cfn-lint


def _statements(synth: Synth) -> list[dict[str, Any]]:
    return iam_statements(synth.template_json["Resources"])


def test_no_iam_action_star_and_resource_star_only_where_aws_requires_it(synth: Synth) -> None:
    for st in _statements(synth):
        actions = _as_list(st["Action"])
        assert "*" not in actions
        assert not any(a.endswith(":*") for a in actions), actions
        if "*" in _as_list(st["Resource"]):
            unexplained = set(actions) - set(STAR_RESOURCE_ACTIONS)
            assert not unexplained, f"Resource '*' for {unexplained}: narrow it or document why AWS requires it"


def test_asg_scaling_is_limited_to_this_clusters_node_groups(synth: Synth) -> None:
    scaling = [st for st in _statements(synth) if "autoscaling:SetDesiredCapacity" in _as_list(st["Action"])]
    managed = {"aws:ResourceTag/eks:cluster-name": "ml-test"}
    allowed = (managed, {"aws:ResourceTag/kubernetes.io/cluster/ml-test": "owned"})
    conditions = [st["Condition"]["StringEquals"] for st in scaling]
    assert conditions  # interruption and runbook functions: each scales only this cluster's groups
    assert all(condition in allowed for condition in conditions)
    assert set(map(str, conditions)) == set(map(str, allowed))


def test_cdk_nag_reports_no_unacknowledged_findings(synth: Synth) -> None:
    report = synth.validation_report()
    unacknowledged = [
        (v["ruleName"], [r.get("constructPath") for r in v.get("violatingResources", v.get("violatingConstructs", []))])
        for plugin in report.get("pluginReports", [])
        for v in plugin.get("violations", [])
    ]
    assert not unacknowledged
    assert synth.error is None, str(synth.error)
    (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success"
    for acknowledged in nag["suppressedViolations"]:
        assert len(acknowledged["reason"]) > 40, acknowledged  # a specific reason, not "ok"


def test_no_cdk_warnings_or_errors_on_the_stack(synth: Synth) -> None:
    stack = synth.app.node.find_child(STACK_NAME)
    annotations = Annotations.from_stack(stack)  # type: ignore[arg-type]
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_warning("*", Match.any_value()) == []


def test_template_passes_cfn_lint(synth: Synth) -> None:
    cfn_lint = shutil.which("cfn-lint") or str(Path(sys.executable).with_name("cfn-lint"))
    # W3005 ignored as in the Makefile: CDK's explicit DependsOn on a role next to a GetAtt of it
    proc = subprocess.run(
        [cfn_lint, "--ignore-checks", "W3005", "--", str(synth.template_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_assets_are_bundled_without_docker_when_the_wheel_cache_exists(synth: Synth) -> None:
    if not synth.bundled:
        pytest.skip("no wheel cache or Python 3.13 here: assets were not bundled (run `make setup`)")
    manifest = json.loads((synth.outdir / f"{STACK_NAME}.assets.json").read_text())
    staged = [
        synth.outdir / f["source"]["path"]
        for f in manifest["files"].values()
        if f["source"]["path"] != f"{STACK_NAME}.template.json"
    ]
    layer_dirs = [p for p in staged if (p / "python" / "kubernetes").is_dir()]
    code_dirs = [p for p in staged if (p / "gpuwarden" / "__init__.py").is_file()]
    assert len(layer_dirs) == 1
    assert len(code_dirs) == 1
    assert not (layer_dirs[0] / "python" / "kubernetes" / "aio").exists()
    assert (layer_dirs[0] / "python" / "botocore" / "data").is_dir()
    assert list((code_dirs[0] / "gpuwarden").glob("__pycache__/__init__.cpython-313.pyc"))
