"""Policy delivery: validated at synth time with gpuwarden's own model, stored in SSM, read cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.config import Settings, load_policy
from infra.app import build_app
from infra.config import SKIP_BUNDLING, SettingsError
from tests.infra.conftest import Synth

REPO = Path(__file__).resolve().parents[2]


def _parameter_value(synth: Synth) -> dict[str, Any]:
    (parameter,) = synth.resources("AWS::SSM::Parameter").values()
    value: dict[str, Any] = json.loads(parameter["Properties"]["Value"])
    return value


def test_a_bad_policy_fails_the_synth_with_the_validation_error(tmp_path: Path) -> None:
    # Given a policy with an out-of-range threshold, passed the way `cdk synth -c` / cdk.json do
    context = {"cluster": "ml-test", SKIP_BUNDLING: True, "policy": {"gpu_idle": {"threshold_percent": 250}}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}  # as a bare `npx cdk`
    env |= {"CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}
    # When the CDK app runs (cdk.json: `python -m infra.app`)
    proc = subprocess.run(
        [sys.executable, "-m", "infra.app"], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    # Then it fails, naming the field, what was given and what is allowed, and writes no template
    assert proc.returncode == 2
    assert "invalid gpuwarden policy" in proc.stderr
    assert "gpu_idle.threshold_percent: given 250; allowed: at most 100" in proc.stderr
    # said once, in its own lines, without a Python traceback (was 39 lines ending in one)
    assert proc.stderr.startswith("gpuwarden: cdk: invalid gpuwarden policy"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert "end-of-life" not in proc.stderr  # no Node 20 banner, outside make too
    assert not (tmp_path / "out" / "GpuwardenStack.template.json").exists()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"policy": {"windows": [{"name": "w", "schedule": "not cron", "duration": "1h"}]}}, "windows"),
        ({"policy": {"unknown_key": 1}}, "unknown_key"),
        ({"policy": "[1, 2]"}, "must be a mapping"),
        ({"policy": {"cluster": "other"}}, "is not context 'cluster'"),
        ({"policy": {}, "policyFile": "policy.yaml"}, "not both"),
        ({"policyFile": "does/not/exist.yaml"}, "policyFile"),
    ],
)
def test_invalid_policy_context_is_refused(context: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        build_app(context={"cluster": "ml-test", SKIP_BUNDLING: True, **context})


def test_the_default_policy_is_just_the_cluster(synth: Synth) -> None:
    assert _parameter_value(synth) == {"cluster": "ml-test"}


def test_a_policy_file_in_yaml_is_stored_as_canonical_json(tmp_path: Path, synth_with: Any) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("gpu_idle:\n  threshold_percent: 5\nrebalance:\n  action: drain\n")
    synth = synth_with({"policyFile": str(path)})
    assert _parameter_value(synth) == {
        "cluster": "ml-test",
        "gpu_idle": {"threshold_percent": 5},
        "rebalance": {"action": "drain"},
    }
    # the functions are told where it is, and may read only that parameter
    (parameter_id,) = synth.resources("AWS::SSM::Parameter")
    for fn in synth.resources("AWS::Lambda::Function").values():
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        if (
            fn["Properties"]["Handler"].startswith("gpuwarden.handlers.")
            and "cluster_access" not in fn["Properties"]["Handler"]
        ):
            assert env["GPUWARDEN_POLICY_PARAMETER"] == {"Ref": parameter_id}


def test_functions_read_the_parameter_with_a_five_minute_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto import mock_aws

    for key, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        import boto3

        ssm = boto3.client("ssm", region_name="us-west-2")
        ssm.put_parameter(Name="/gpuwarden/policy-test", Type="String", Value='{"cluster": "ml-test"}')
        settings = Settings(policy_parameter="/gpuwarden/policy-test")
        first = load_policy(settings)
        ssm.put_parameter(Name="/gpuwarden/policy-test", Type="String", Value='{"cluster": "changed"}', Overwrite=True)
        cached = load_policy(settings)
    assert first.cluster == "ml-test"
    assert cached.cluster == "ml-test"  # the warm process keeps it five minutes


def _policy_versions(synth: Synth) -> set[str]:
    return {
        fn["Properties"]["Environment"]["Variables"]["GPUWARDEN_POLICY_VERSION"]
        for fn in synth.resources("AWS::Lambda::Function").values()
        if "GPUWARDEN_POLICY_PARAMETER" in fn["Properties"].get("Environment", {}).get("Variables", {})
    }


def test_a_changed_policy_changes_every_functions_configuration(synth: Synth, synth_with: Any) -> None:
    # warm containers keep the policy they loaded; a new policy must reach them with the deploy
    (default,) = _policy_versions(synth)
    (changed,) = _policy_versions(synth_with({"policy": {"rebalance": {"action": "drain"}}}))
    assert default != changed
