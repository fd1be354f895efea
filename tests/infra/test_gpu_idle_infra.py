"""The GPU-idle part of the synthesized stack: the fleet alarm's query, the rules' patterns, IAM."""

from __future__ import annotations

from typing import Any

from aws_cdk import App
from aws_cdk.assertions import Template

from infra.components.gpu_idle import alarm_prefixes, idle_query, rule_specs
from tests.infra.conftest import Synth

GPU_IDLE_HANDLER = "gpuwarden.handlers.gpu_signals.handler"
QUERY = (
    "SELECT AVG(node_gpu_utilization) FROM SCHEMA(ContainerInsights, ClusterName, InstanceId, NodeName) "
    "WHERE ClusterName = 'ml-test' GROUP BY InstanceId, NodeName ORDER BY AVG() ASC"
)


def _function_id(synth: Synth) -> str:
    (fn_id,) = [
        k for k, r in synth.resources("AWS::Lambda::Function").items() if r["Properties"]["Handler"] == GPU_IDLE_HANDLER
    ]
    return fn_id


def _rule(synth: Synth, detail_type: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        r["Properties"]
        for r in synth.resources("AWS::Events::Rule").values()
        if r["Properties"]["EventPattern"]["detail-type"] == [detail_type]
    ]
    assert len(rules) == 1
    return rules[0]


def test_fleet_alarm_is_a_metrics_insights_query_per_node_below_10_percent_for_an_hour(synth: Synth) -> None:
    (alarm,) = [
        a["Properties"]
        for a in synth.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("AlarmName") == "gpuwarden-gpu-idle-ml-test"
    ]
    assert alarm["Metrics"] == [{"Id": "idle", "Expression": QUERY, "Period": 300, "ReturnData": True}]
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert alarm["Threshold"] == 10
    assert alarm["EvaluationPeriods"] == 12  # 12 x 5 min = 1 h
    assert alarm["DatapointsToAlarm"] == 12
    assert alarm["TreatMissingData"] == "notBreaching"
    assert "MetricName" not in alarm


def test_query_names_the_cluster() -> None:
    assert "WHERE ClusterName = 'ml-prod'" in idle_query("ml-prod")


def test_alarm_and_contributor_rules_match_only_gpuwardens_alarms_in_alarm(synth: Synth) -> None:
    fn_id = _function_id(synth)
    for detail_type in ("CloudWatch Alarm State Change", "CloudWatch Alarm Contributor State Change"):
        rule = _rule(synth, detail_type)
        assert rule["EventPattern"] == {
            "source": ["aws.cloudwatch", "aws.monitoring"],
            "detail-type": [detail_type],
            "detail": {
                "state": {"value": ["ALARM"]},
                "$or": [
                    {"alarmName": [{"prefix": "gpuwarden-gpu-idle"}]},
                    {
                        "configuration": {
                            "metrics": {
                                "metricStat": {
                                    "metric": {
                                        "name": [
                                            "node_gpu_utilization",
                                            "DCGM_FI_DEV_GPU_UTIL",
                                            "node_neuroncore_utilization",
                                        ]
                                    }
                                }
                            }
                        }
                    },
                    {
                        "configuration": {
                            "metrics": {
                                "expression": [
                                    {"wildcard": "*node_gpu_utilization*"},
                                    {"wildcard": "*DCGM_FI_DEV_GPU_UTIL*"},
                                    {"wildcard": "*node_neuroncore_utilization*"},
                                ]
                            }
                        }
                    },
                ],
            },
        }
        (target,) = rule["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [fn_id, "Arn"]}
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600}
        assert "DeadLetterConfig" in target


def test_users_alarm_prefixes_from_context_are_routed_too() -> None:
    app = App(context={"gpuIdleAlarmPrefixes": '["team-a-gpu-idle", "gpuwarden-gpu-idle"]'})
    prefixes = alarm_prefixes(app)
    assert prefixes == ["gpuwarden-gpu-idle", "team-a-gpu-idle"]
    alarm_rule, contributor_rule = rule_specs(prefixes)
    by_name = alarm_rule.pattern["detail"]["$or"][0]
    assert by_name["alarmName"] == [{"prefix": "gpuwarden-gpu-idle"}, {"prefix": "team-a-gpu-idle"}]
    assert contributor_rule.pattern["detail"] == alarm_rule.pattern["detail"]
    assert alarm_prefixes(App()) == ["gpuwarden-gpu-idle"]


def _statements(synth: Synth) -> list[dict[str, Any]]:
    return [
        st
        for p in synth.resources("AWS::IAM::Policy").values()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_gpu_idle_function_can_recheck_retire_in_its_cluster_groups_and_start_the_drain(synth: Synth) -> None:
    statements = _statements(synth)
    recheck = [st for st in statements if st.get("Sid") == "GpuIdleRecheck"]
    assert recheck == [
        {"Action": "cloudwatch:GetMetricData", "Effect": "Allow", "Resource": "*", "Sid": "GpuIdleRecheck"}
    ]
    retire = [st for st in statements if st["Action"] == "autoscaling:TerminateInstanceInAutoScalingGroup"]
    conditions = [st["Condition"]["StringEquals"] for st in retire]
    assert {"aws:ResourceTag/eks:cluster-name": "ml-test"} in conditions
    assert {"aws:ResourceTag/kubernetes.io/cluster/ml-test": "owned"} in conditions
    assert len(retire) == 2
    (sm_id,) = synth.resources("AWS::StepFunctions::StateMachine")
    fn_id = _function_id(synth)
    env = synth.template_json["Resources"][fn_id]["Properties"]["Environment"]["Variables"]
    assert env["GPUWARDEN_DRAIN_STATE_MACHINE_ARN"] == {"Ref": sm_id}


def test_template_assertions_see_one_gpu_idle_function(synth: Synth) -> None:
    template: Template = synth.template
    template.has_resource_properties("AWS::Lambda::Function", {"Handler": GPU_IDLE_HANDLER, "Runtime": "python3.13"})
