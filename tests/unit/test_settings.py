"""Settings fail closed (docs/policy.md): every variable parsed strictly, a value gpuwarden
does not understand refuses to run naming the variable; KUBECONFIG's paths merged as kubectl does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gpuwarden.adapters.kubeconfig import client_from_kubeconfig, first_current_context
from gpuwarden.config import Settings, load_policy
from gpuwarden.domain.errors import ClusterUnreachable, InvalidSetting


@pytest.mark.parametrize("value", ["on", "off", "enabled", "y", "2", "tru"])
def test_an_unknown_dry_run_value_refuses_to_run_naming_the_accepted_values(value: str) -> None:
    # Given DRY_RUN set to a word gpuwarden does not know / When the settings are read
    with pytest.raises(InvalidSetting) as raised:
        Settings.from_env({"DRY_RUN": value})
    # Then the variable and what it accepts are named
    assert raised.value.name == "DRY_RUN"
    assert "true" in str(raised.value)
    assert "false" in str(raised.value)


@pytest.mark.parametrize(
    ("value", "expected"), [("TRUE", True), ("1", True), ("yes", True), ("no", False), ("", False)]
)
def test_the_known_dry_run_values_are_read_in_any_case(value: str, expected: bool) -> None:
    assert Settings.from_env({"DRY_RUN": value}).dry_run is expected


@pytest.mark.parametrize("value", ["tomorrow", "2026-06-01T09:30:00", "2026-06-01", "09:30Z", "2026-13-01T00:00:00Z"])
def test_gpuwarden_now_must_be_rfc3339_with_an_offset(value: str) -> None:
    with pytest.raises(InvalidSetting) as raised:
        Settings.from_env({"GPUWARDEN_NOW": value})
    assert raised.value.name == "GPUWARDEN_NOW"


def test_gpuwarden_now_keeps_its_offset() -> None:
    now = Settings.from_env({"GPUWARDEN_NOW": "2026-06-01T09:30:00+09:00"}).now
    assert now == datetime(2026, 6, 1, 9, 30, tzinfo=timezone(timedelta(hours=9)))
    assert Settings.from_env({"GPUWARDEN_NOW": "2026-06-01T00:30:00Z"}).now == datetime(2026, 6, 1, 0, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GPUWARDEN_KUBE_QPS", "fast"),
        ("GPUWARDEN_KUBE_QPS", "nan"),
        ("GPUWARDEN_KUBE_QPS", "0"),
        ("GPUWARDEN_KUBE_BURST", "1.5"),
        ("GPUWARDEN_KUBE_BURST", "-3"),
    ],
)
def test_numbers_must_be_numbers(name: str, value: str) -> None:
    with pytest.raises(InvalidSetting) as raised:
        Settings.from_env({name: value})
    assert raised.value.name == name
    assert repr(value) in str(raised.value)


def test_no_policy_deployed_is_a_failure_naming_the_variable() -> None:
    settings = Settings.from_env({"AWS_LAMBDA_FUNCTION_NAME": "gpuwarden-notices"})
    with pytest.raises(InvalidSetting) as raised:
        load_policy(settings)
    assert raised.value.name == "GPUWARDEN_POLICY_PARAMETER"


def test_no_policy_locally_warns_on_stderr_naming_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    import gpuwarden.config as config

    config._warned.clear()
    policy = load_policy(Settings.from_env({"GPUWARDEN_CLUSTER": "ml-prod"}))
    assert policy.cluster == "ml-prod"
    err = capsys.readouterr().err
    assert "no policy" in err
    assert "'ml-prod'" in err
    assert "GPUWARDEN_POLICY_FILE" in err


def _kubeconfig(path: Path, name: str, server: str, current: str | None) -> Path:
    document: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {"token": f"token-{name}"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }
    if current:
        document["current-context"] = current
    path.write_text(yaml.safe_dump(document))
    return path


def test_several_kubeconfig_paths_merge_as_kubectl_first_current_context_wins(tmp_path: Path) -> None:
    # Given two files, both setting a current-context (kubectl: the first file's wins)
    first = _kubeconfig(tmp_path / "a", "alpha", "https://alpha.example:6443", "alpha")
    second = _kubeconfig(tmp_path / "b", "beta", "https://beta.example:6443", "beta")
    # When a client is built from KUBECONFIG=a:b (and from b:a)
    client = client_from_kubeconfig(f"{first}:{second}")
    reversed_client = client_from_kubeconfig(f"{second}:{first}")
    # Then the first file's current context is used
    assert client.configuration.host == "https://alpha.example:6443"
    assert reversed_client.configuration.host == "https://beta.example:6443"


def test_the_current_context_may_come_from_a_later_file(tmp_path: Path) -> None:
    # Given a first file without current-context and a second naming the first file's context
    first = _kubeconfig(tmp_path / "a", "alpha", "https://alpha.example:6443", None)
    second = _kubeconfig(tmp_path / "b", "beta", "https://beta.example:6443", "alpha")
    # Then the context named by the second file is found in the first
    assert first_current_context(f"{first}:{tmp_path / 'missing'}:{second}") == "alpha"
    assert client_from_kubeconfig(f"{first}:{second}").configuration.host == "https://alpha.example:6443"


@pytest.mark.parametrize("text", ["clusters: [\n  - name: x\n  bad", "", "just a string"])
def test_a_malformed_kubeconfig_is_a_typed_error_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ClusterUnreachable) as raised:
        client_from_kubeconfig(str(path))
    assert str(path) in str(raised.value)


def test_a_kubeconfig_that_does_not_exist_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterUnreachable) as raised:
        client_from_kubeconfig(str(tmp_path / "nope"))
    assert "nope" in str(raised.value)
