"""The policy document in SSM (GPUWARDEN_POLICY_PARAMETER)."""

from __future__ import annotations

import hashlib

from aws_cdk import aws_ssm as ssm
from constructs import Construct


class PolicyParameter(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, policy_json: str) -> None:
        super().__init__(scope, construct_id)
        #: changes with the document: in the functions' environment, so a deploy that changes the
        #: policy also replaces warm containers (which keep the policy they loaded at start)
        self.version = hashlib.sha256(policy_json.encode()).hexdigest()[:16]
        self.parameter = ssm.StringParameter(
            self,
            "Parameter",
            string_value=policy_json,
            description="gpuwarden policy (JSON, validated by the runtime's pydantic model)",
            tier=ssm.ParameterTier.ADVANCED if len(policy_json) > 4096 else ssm.ParameterTier.STANDARD,
        )
