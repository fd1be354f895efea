"""Optional VPC placement (context vpcId / subnetIds / securityGroupIds)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.app import build_app
from infra.config import SKIP_BUNDLING, SettingsError
from tests.infra.conftest import FULL_CONTEXT, Synth

SUBNETS = ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]


def _vpc_functions(synth: Synth) -> list[dict[str, Any]]:
    return [
        f["Properties"]
        for f in synth.resources("AWS::Lambda::Function").values()
        if str(f["Properties"].get("Handler", "")).startswith("gpuwarden.handlers.")
    ]


def test_without_vpc_context_nothing_is_placed_in_a_vpc(synth: Synth) -> None:
    assert all("VpcConfig" not in f for f in _vpc_functions(synth))
    assert synth.resources("AWS::EC2::SecurityGroup") == {}


def test_every_gpuwarden_function_and_the_installer_run_in_the_given_subnets_with_a_created_group(
    synth_with: Any,
) -> None:
    synth = synth_with(FULL_CONTEXT)
    (group_id, group) = next(iter(synth.resources("AWS::EC2::SecurityGroup").items()))
    assert group["Properties"]["VpcId"] == "vpc-0123456789abcdef0"
    assert "SecurityGroupIngress" not in group["Properties"]
    functions = _vpc_functions(synth)
    assert any(f["Handler"] == "gpuwarden.handlers.cluster_access.handler" for f in functions)
    for fn in functions:
        assert fn["VpcConfig"] == {"SubnetIds": SUBNETS, "SecurityGroupIds": [{"Fn::GetAtt": [group_id, "GroupId"]}]}


def test_vpc_functions_get_the_eni_permissions_lambda_checks(synth_with: Any) -> None:
    synth = synth_with(FULL_CONTEXT)
    roles = synth.resources("AWS::IAM::Role")
    for fn in _vpc_functions(synth):
        role = roles[fn["Role"]["Fn::GetAtt"][0]]
        assert any("AWSLambdaVPCAccessExecutionRole" in str(arn) for arn in role["Properties"]["ManagedPolicyArns"])


def test_given_security_groups_are_used_as_they_are(synth_with: Any) -> None:
    synth = synth_with(
        {"vpcId": "vpc-0123456789abcdef0", "subnetIds": SUBNETS, "securityGroupIds": ["sg-0123456789abcdef0"]}
    )
    assert synth.resources("AWS::EC2::SecurityGroup") == {}
    for fn in _vpc_functions(synth):
        assert fn["VpcConfig"]["SecurityGroupIds"] == ["sg-0123456789abcdef0"]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"vpcId": "vpc-0123456789abcdef0"}, "needs 'subnetIds'"),
        ({"subnetIds": SUBNETS}, "need 'vpcId'"),
        ({"vpcId": "vpc-0123456789abcdef0", "subnetIds": ["subnet-nope"]}, "not valid ids"),
        ({"vpcId": "my-vpc", "subnetIds": SUBNETS}, "'vpcId' is not valid"),
    ],
)
def test_incomplete_or_malformed_network_context_fails_the_synth(context: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        build_app(context={"cluster": "ml-test", SKIP_BUNDLING: True, **context})


def test_full_deployment_has_no_cdk_warnings_or_errors(synth_with: Any) -> None:
    from aws_cdk.assertions import Annotations, Match

    from infra.app import STACK_NAME

    synth = synth_with(FULL_CONTEXT)
    annotations = Annotations.from_stack(synth.app.node.find_child(STACK_NAME))
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_warning("*", Match.any_value()) == []
