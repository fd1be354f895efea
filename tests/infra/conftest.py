"""Synthesize the gpuwarden app once per test session (per xdist worker).

With a wheel cache (``make setup``) and Python 3.13 present, the real layer and code assets
are bundled (from the cached layer build: fast). Without them the assets are not bundled
(context ``gpuwardenSkipBundling``) and the layer build is tested on its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App
from aws_cdk.assertions import Template

from infra.app import STACK_NAME, build_app
from infra.config import SKIP_BUNDLING
from layers.runtime import build as layer_build

#: a user's GPU-idle alarm prefix, configured beside gpuwarden's own (context gpuIdleAlarmPrefixes)
USER_PREFIX = "team-a-idle-"


def layer_build_possible() -> bool:
    try:
        layer_build.find_lambda_python()
    except layer_build.LayerBuildError:
        return False
    return layer_build.REQUIREMENTS.exists() and layer_build._wheel_cache_complete("x86_64")


@dataclass
class Synth:
    app: App
    outdir: Path
    template: Template
    template_json: dict[str, Any]
    template_path: Path
    bundled: bool
    #: the error of app.synth(): cdk-nag findings fail the synth through the validation plugin
    error: Exception | None

    def validation_report(self) -> dict[str, Any]:
        path = self.outdir / "validation-report.json"
        report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        return report

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template_json["Resources"].items() if v["Type"] == type_}


def iam_statements(resources: Mapping[str, dict[str, Any]], ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every statement of the IAM policies, and of the roles' inline policies, among a template's
    ``resources`` (``ids``: only those logical ids)."""
    chosen = resources if ids is None else {i: resources[i] for i in ids}
    documents = [
        document
        for resource in chosen.values()
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::Role")
        for document in (
            [resource["Properties"].get("PolicyDocument")]
            + [p["PolicyDocument"] for p in resource["Properties"].get("Policies", [])]
        )
        if document
    ]
    return [statement for document in documents for statement in document["Statement"]]


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    bundled = layer_build_possible()
    context: dict[str, Any] = {"cluster": "ml-test"}
    if not bundled:
        context[SKIP_BUNDLING] = True
    return synthesize(tmp_path_factory.mktemp("cdk.out"), context, bundled=bundled)


#: every optional deployment feature on (tests/infra/test_deploy_*.py)
FULL_CONTEXT: dict[str, Any] = {
    "vpcId": "vpc-0123456789abcdef0",
    "subnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210",
    "alarmEmail": "sre@example.com",
    "fleetRoleArn": "arn:aws:iam::123456789012:role/gpu-nodes",
    "policy": {
        "replacement": {"fleet_launch_template": "lt-0123456789abcdef0", "fleet_instance_types": ["p4d.24xlarge"]}
    },
}


@pytest.fixture(scope="session")
def synth_with(tmp_path_factory: pytest.TempPathFactory) -> Callable[[dict[str, Any]], Synth]:
    """Another synth with extra context (cluster ml-test, assets not bundled), once per context."""
    cache: dict[str, Synth] = {}

    def make(extra: dict[str, Any]) -> Synth:
        key = json.dumps(extra, sort_keys=True)
        if key not in cache:
            context = {"cluster": "ml-test", SKIP_BUNDLING: True, **extra}
            cache[key] = synthesize(tmp_path_factory.mktemp("cdk.out"), context, bundled=False)
        return cache[key]

    return make


def synthesize(outdir: Path, context: dict[str, Any], *, bundled: bool) -> Synth:
    app = build_app(outdir=str(outdir), context=context)
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as exc:  # jsii surfaces ValidationFailed as RuntimeError
        error = exc
    template_path = outdir / f"{STACK_NAME}.template.json"
    template_json = json.loads(template_path.read_text())
    return Synth(
        app=app,
        outdir=outdir,
        template=Template.from_json(template_json),
        template_json=template_json,
        template_path=template_path,
        bundled=bundled,
        error=error,
    )
