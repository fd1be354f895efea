"""The offline layer build (layers/runtime/build.py) and the app's settings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App

from infra.config import SKIP_BUNDLING, Settings, SettingsError
from layers.runtime import build as layer_build
from tests.infra.conftest import layer_build_possible

needs_layer_build = pytest.mark.skipif(
    not layer_build_possible(), reason="needs the wheel cache (`make setup`) and Python 3.13"
)


def _pins() -> dict[str, str]:
    pins = {}
    for line in layer_build.REQUIREMENTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_requirements_are_exact_pins_resolved_with_boto3() -> None:
    pins = _pins()
    assert pins["kubernetes"] == "37.0.1"
    assert int(pins["python-dateutil"].split(".")[0]) < 3
    assert {"boto3", "botocore", "pydantic", "aws-lambda-powertools", "pyyaml", "tzdata"} <= set(pins)


def test_every_runtime_dependency_of_pyproject_is_pinned() -> None:
    pins = _pins()
    for requirement in layer_build.runtime_dependencies():
        name = re.split(r"[=<>!~ ;\[]", requirement, maxsplit=1)[0]
        assert re.sub(r"[-_.]+", "-", name).lower() in pins, requirement


def test_a_wrong_interpreter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWARDEN_LAYER_PYTHON", sys.executable)  # the 3.11 test interpreter
    with pytest.raises(layer_build.LayerBuildError, match=r"must be compiled by Python 3\.13"):
        layer_build.find_lambda_python()


def test_a_missing_wheel_cache_says_to_run_make_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(layer_build, "WHEEL_CACHE", tmp_path / "wheels")
    monkeypatch.setattr(layer_build, "LAYER_CACHE", tmp_path / "layer")
    with pytest.raises(layer_build.LayerBuildError, match="make setup"):
        layer_build.build_layer("x86_64", python=sys.executable)


@needs_layer_build
def test_layer_bytecode_is_unchecked_hash_pyc_for_python_313() -> None:
    python = layer_build.find_lambda_python()
    result = layer_build.build_layer("x86_64", python=python)  # cached after the first build
    magic = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.stdout.write(importlib.util.MAGIC_NUMBER.hex())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    site = result.path / "python"
    pycs = list((site / "kubernetes" / "client" / "__pycache__").glob("*.cpython-313.pyc"))
    assert pycs
    header = pycs[0].read_bytes()[:8]
    assert header[:4].hex() == magic
    assert int.from_bytes(header[4:8], "little") == 0b01  # hash-based, check_source off
    assert not (site / "kubernetes" / "aio").exists()
    assert (site / "botocore" / "data").is_dir()


@needs_layer_build
def test_a_cached_layer_build_is_instant() -> None:
    layer_build.build_layer("x86_64")
    result = layer_build.build_layer("x86_64")
    assert result.cached


def test_settings_default_and_validate() -> None:
    settings = Settings.from_context(App().node)
    assert settings.cluster == "ml-prod"
    assert settings.lambda_architecture == "x86_64"
    assert json.loads(settings.policy_json) == {"cluster": "ml-prod"}
    assert not settings.skip_bundling
    with pytest.raises(SettingsError, match="lambdaArchitecture"):
        Settings.from_context(App(context={"lambdaArchitecture": "sparc"}).node)
    with pytest.raises(SettingsError, match="policy"):
        Settings.from_context(App(context={"policy": "{not json"}).node)


def test_settings_read_policy_and_skip_bundling_from_context() -> None:
    app = App(context={"cluster": "gpu-a", "policy": '{"gpu_idle": {"threshold_percent": 5}}', SKIP_BUNDLING: "true"})
    settings = Settings.from_context(app.node)
    assert json.loads(settings.policy_json) == {"cluster": "gpu-a", "gpu_idle": {"threshold_percent": 5}}
    assert settings.skip_bundling
