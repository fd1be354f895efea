"""A policy that does not validate says, one line per error, which key, what was given and what is
allowed, and for a misspelled key the one that was meant (docs/policy.md, "When the policy does not
validate"): a person fixes it from the message alone, and no library URL or dump gets in the way."""

from __future__ import annotations

import pytest

from gpuwarden.config import parse_policy
from gpuwarden.domain.errors import InvalidPolicy


def problems(text: str) -> tuple[str, ...]:
    with pytest.raises(InvalidPolicy) as caught:
        parse_policy(text, "policy.yaml")
    assert caught.value.source == "policy.yaml"
    assert "https://" not in str(caught.value)
    assert "\n" not in str(caught.value)  # one line in a JSON reason and a log line
    return caught.value.problems


def test_a_misspelled_key_names_its_path_what_was_given_and_the_key_meant() -> None:
    # Given the policy, threshold_percent misspelled
    found = problems("cluster: ml-prod\ngpu_idle:\n  threshold_percnt: 10\n")
    # Then one line: the dotted path, the value given, "did you mean", and the keys allowed there
    assert len(found) == 1
    line = found[0]
    assert line.startswith("gpu_idle.threshold_percnt: unknown key (given 10)")
    assert "did you mean `threshold_percent`?" in line
    assert "Allowed here: enabled, threshold_percent" in line


def test_a_misspelled_section_is_matched_against_the_top_level_keys() -> None:
    (line,) = problems("cluster: ml-prod\ngpu_idel: {}\n")
    assert "did you mean `gpu_idle`?" in line


def test_a_key_nothing_resembles_gets_the_allowed_keys_and_no_guess() -> None:
    (line,) = problems(
        "cluster: ml-prod\nwindows:\n  - {name: a, schedule: '0 9 * * *', duration: 1h,"
        " max_disruptions: 0, colour: red}\n"
    )
    assert line.startswith("windows.0.colour: unknown key (given 'red'). Allowed here: name, schedule")
    assert "did you mean" not in line


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("gpu_idle: {threshold_percent: 500}", "gpu_idle.threshold_percent: given 500; allowed: at most 100"),
        ("gpu_idle: {enabled: maybe}", "gpu_idle.enabled: given 'maybe'; allowed: true or false"),
        ("gpu_idle: {period_seconds: 1.5}", "gpu_idle.period_seconds: given 1.5; allowed: a whole number"),
        ("rebalance: {action: evict}", "rebalance.action: given 'evict'; allowed: 'prepare' or 'drain'"),
        ("gpu_health: {repair_after: soon}", "gpu_health.repair_after: invalid duration 'soon'"),
        ("alerts: {GPUXidError: reboot}", "alerts.GPUXidError: given 'reboot'; allowed: 'gpu-idle' or 'gpu-unhealthy'"),
    ],
)
def test_a_value_out_of_bounds_says_what_was_given_and_what_is_allowed(document: str, expected: str) -> None:
    (line,) = problems(f"cluster: ml-prod\n{document}\n")
    assert line.startswith(expected)


def test_every_error_is_its_own_line() -> None:
    found = problems("gpu_idle: {threshold_percnt: 10, enabled: maybe}\n")
    assert found == (
        "cluster: required, not given",
        "gpu_idle.enabled: given 'maybe'; allowed: true or false",
        found[2],
    )
    assert found[2].startswith("gpu_idle.threshold_percnt: unknown key")


def test_a_document_that_is_not_a_mapping_or_not_yaml_says_so_in_one_line() -> None:
    (not_mapping,) = problems("- cluster: ml-prod\n")
    assert "a policy is a mapping of keys" in not_mapping
    (not_yaml,) = problems("cluster: [ml-prod\n")
    assert "\n" not in not_yaml
