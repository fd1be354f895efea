"""The dependency layer, built offline by ``layers/runtime/build.py`` (no Docker)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.components.bundling import layer_code

LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13


def lambda_architecture(name: str) -> lambda_.Architecture:
    return lambda_.Architecture.ARM_64 if name == "arm64" else lambda_.Architecture.X86_64


class RuntimeLayer(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, architecture: str, skip_bundling: bool) -> None:
        super().__init__(scope, construct_id)
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=layer_code(architecture, skip=skip_bundling),
            compatible_runtimes=[LAMBDA_RUNTIME],
            compatible_architectures=[lambda_architecture(architecture)],
            description=(
                "gpuwarden runtime dependencies (layers/runtime/requirements.txt), "
                "bytecode compiled by CPython 3.13 (unchecked-hash)"
            ),
            removal_policy=RemovalPolicy.DESTROY,  # old versions are useless once functions moved on
        )
