"""IAM least privilege on the synthesized template: no `*` actions, writes limited to the
cluster's tagged resources, EKS on the one cluster, EC2 Fleet and PassRole only when configured."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from infra.components import cloud_permissions
from tests.infra.conftest import FULL_CONTEXT, Synth

#: actions that change EC2 / Auto Scaling state: each statement granting one must be tag-conditioned
#: or (RunInstances, CreateTags) conditioned on the launch template / the creating call
GUARDED_WRITES = {
    "ec2:TerminateInstances": "aws:ResourceTag",
    "autoscaling:SetDesiredCapacity": "aws:ResourceTag",
    "autoscaling:TerminateInstanceInAutoScalingGroup": "aws:ResourceTag",
    "autoscaling:UpdateAutoScalingGroup": "aws:ResourceTag",
    "ec2:RunInstances": "ec2:LaunchTemplate|aws:ResourceTag",
    "ec2:CreateTags": "ec2:CreateAction",
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    resources = template["Resources"].values()
    docs = [r["Properties"]["PolicyDocument"] for r in resources if r["Type"] == "AWS::IAM::Policy"]
    docs += [
        p["PolicyDocument"]
        for r in resources
        if r["Type"] == "AWS::IAM::Role"
        for p in r["Properties"].get("Policies", [])
    ]
    return [st for doc in docs for st in doc["Statement"]]


def _condition_keys(st: dict[str, Any]) -> str:
    return " ".join(key for operator in st.get("Condition", {}).values() for key in operator)


@pytest.fixture(params=["default", "full"])
def any_synth(request: pytest.FixtureRequest, synth: Synth, synth_with: Any) -> Synth:
    return synth if request.param == "default" else synth_with(FULL_CONTEXT)


def test_no_action_wildcards_anywhere(any_synth: Synth) -> None:
    for st in statements(any_synth.template_json):
        for action in _as_list(st["Action"]):
            assert "*" not in action.split(":")[1] or action.endswith(":GenerateDataKey*"), action


def test_every_state_changing_ec2_or_autoscaling_write_is_conditioned(any_synth: Synth) -> None:
    for st in statements(any_synth.template_json):
        for action in _as_list(st["Action"]):
            if action in GUARDED_WRITES:
                keys = _condition_keys(st)
                assert any(k in keys for k in GUARDED_WRITES[action].split("|")), (action, st.get("Sid"))


def test_create_fleet_and_run_instances_need_the_clusters_launch_template(synth_with: Any) -> None:
    # (one set per function that launches replacements)
    sts = statements(synth_with(FULL_CONTEXT).template_json)
    by_template = [st for st in sts if st.get("Sid") == "FleetFromClusterLaunchTemplate"]
    assert by_template
    for st in by_template:
        assert set(st["Action"]) == {"ec2:CreateFleet", "ec2:RunInstances"}
        assert st["Condition"] == {"StringEquals": {"aws:ResourceTag/kubernetes.io/cluster/ml-test": "owned"}}
        assert json.dumps(st["Resource"]).endswith(':launch-template/lt-0123456789abcdef0"]]}')
    runs = [st for st in sts if st.get("Sid") == "FleetRunFromThatTemplate"]
    assert len(runs) == len(by_template)
    for st in runs:
        condition = json.dumps(st["Condition"]["ArnLike"]["ec2:LaunchTemplate"])
        assert condition.endswith('launch-template/lt-0123456789abcdef0"]]}')
    creates = [st for st in sts if st.get("Sid") == "FleetCreate"]
    assert len(creates) == len(by_template)
    assert all(json.dumps(st["Resource"]).endswith(':fleet/*"]]}') for st in creates)


def _passes_to_ec2(st: dict[str, Any]) -> bool:
    return "ec2.amazonaws.com" in json.dumps(st.get("Condition", {}))


def test_no_fleet_permissions_without_a_fleet_launch_template(synth: Synth) -> None:
    sts = statements(synth.template_json)
    assert not {"ec2:CreateFleet", "ec2:RunInstances"} & {a for st in sts for a in _as_list(st["Action"])}
    assert not [st for st in sts if _passes_to_ec2(st)]


def test_pass_role_only_for_the_configured_fleet_role_and_only_to_ec2(synth_with: Any) -> None:
    sts = statements(synth_with(FULL_CONTEXT).template_json)
    passing = [st for st in sts if "iam:PassRole" in _as_list(st["Action"])]
    for st in passing:  # every PassRole names one role and the one service it may go to
        assert "*" not in json.dumps(st["Resource"])
        assert "iam:PassedToService" in st["Condition"]["StringEquals"]
    to_ec2 = [st for st in passing if _passes_to_ec2(st)]
    assert to_ec2
    assert all(st["Resource"] == "arn:aws:iam::123456789012:role/gpu-nodes" for st in to_ec2)
    without_role = {k: v for k, v in FULL_CONTEXT.items() if k != "fleetRoleArn"}
    sts = statements(synth_with(without_role).template_json)
    assert not [st for st in sts if _passes_to_ec2(st)]
    assert "ec2:CreateFleet" in {a for st in sts for a in _as_list(st["Action"])}


def test_eks_describe_cluster_only_on_the_one_cluster(any_synth: Synth) -> None:
    describing = [st for st in statements(any_synth.template_json) if "eks:DescribeCluster" in _as_list(st["Action"])]
    assert describing
    for st in describing:
        assert _as_list(st["Action"]) == ["eks:DescribeCluster"]
        assert json.dumps(st["Resource"]).endswith(':cluster/ml-test"]]}')


def test_retire_instances_is_tag_conditioned_on_both_cluster_tags() -> None:
    # Given the helper a retiring function (gpu-idle, runbook) would use
    from aws_cdk import aws_iam as iam
    from constructs import Construct

    from infra.components.functions import GpuwardenFunction

    class _Fn(Construct):
        def __init__(self, scope: Construct) -> None:
            super().__init__(scope, "Fn")
            self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

        allow = GpuwardenFunction.allow

    stack = Stack(App(), "T")
    fn = _Fn(stack)
    cloud_permissions.retire_instances(fn, "ml-test")  # type: ignore[arg-type]
    sts = statements(Template.from_stack(stack).to_json())
    terminate = [st for st in sts if st["Action"] == "ec2:TerminateInstances"]
    assert [st["Condition"]["StringEquals"] for st in terminate] == [
        {"aws:ResourceTag/eks:cluster-name": "ml-test"},
        {"aws:ResourceTag/kubernetes.io/cluster/ml-test": "owned"},
    ]
    assert all(json.dumps(st["Resource"]).endswith(':instance/*"]]}') for st in terminate)
    in_group = [st for st in sts if st["Action"] == "autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert len(in_group) == 2
    assert all("aws:ResourceTag/" in _condition_keys(st) for st in in_group)


def test_full_deployment_is_cdk_nag_clean_with_specific_reasons(synth_with: Any) -> None:
    synth = synth_with(FULL_CONTEXT)
    assert synth.error is None, str(synth.error)
    (nag,) = [p for p in synth.validation_report()["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success"
    assert not nag.get("violations")
    for acknowledged in nag["suppressedViolations"]:
        assert len(acknowledged["reason"]) > 40, acknowledged
