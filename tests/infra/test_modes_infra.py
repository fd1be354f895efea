"""`cdk synth -c mode=observe`: every function configured to write nothing; context values parsed
strictly; one stack per cluster (the stack name carries the cluster, or `-c stackName`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from infra.app import STACK_NAME, build_app
from infra.config import SKIP_BUNDLING, SettingsError
from tests.infra.conftest import Synth


def _environments(synth: Synth) -> dict[str, dict[str, Any]]:
    return {
        name: fn["Properties"].get("Environment", {}).get("Variables", {})
        for name, fn in synth.resources("AWS::Lambda::Function").items()
        if str(fn["Properties"].get("Handler", "")).startswith("gpuwarden.handlers.")
        and "cluster_access" not in str(fn["Properties"].get("Handler", ""))
    }


def test_observe_mode_configures_every_function_to_write_nothing(
    synth: Synth, synth_with: Callable[[dict[str, Any]], Synth]
) -> None:
    # Given the stack synthesized with -c mode=observe
    observe = synth_with({"mode": "observe"})
    # Then every gpuwarden function runs in observe mode (dry run, "Would…" Events)
    environments = _environments(observe)
    assert len(environments) >= 5
    for name, env in environments.items():
        assert env.get("GPUWARDEN_MODE") == "observe", name
        assert env.get("DRY_RUN") == "true", name
    # And by default none does
    assert all("GPUWARDEN_MODE" not in env and "DRY_RUN" not in env for env in _environments(synth).values())


@pytest.mark.parametrize(
    ("context", "named"),
    [({"mode": "dry"}, "mode"), ({"mode": "Observe "}, "mode"), ({"clusterAccess": "maybe"}, "clusterAccess")],
)
def test_a_context_value_gpuwarden_does_not_understand_fails_the_synth_naming_it(
    context: dict[str, Any], named: str
) -> None:
    with pytest.raises(SettingsError, match=named):
        build_app(context={"cluster": "ml-test", SKIP_BUNDLING: True, **context})


def test_the_stack_name_carries_the_cluster_so_two_clusters_share_an_account() -> None:
    names = set()
    for context in ({"cluster": "ml-prod"}, {"cluster": "ml-staging"}, {"cluster": "ml-prod", "stackName": "gw-a"}):
        app = build_app(context={SKIP_BUNDLING: True, **context})
        names.add(app.node.find_child(STACK_NAME).stack_name)  # type: ignore[attr-defined]
    assert names == {"Gpuwarden-ml-prod", "Gpuwarden-ml-staging", "gw-a"}
