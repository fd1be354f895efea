"""Lambda's init phase (docs/architecture.md, "Init and invocation"): what every handler module does
at import inside Lambda, and nothing outside it."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwarden.domain.errors import HandlingFailed
from gpuwarden.handlers import _runtime
from gpuwarden.wiring import Lazy
from sim import KubeSim
from sim.clock import rfc3339
from tests.integration.conftest import LambdaContext, load_event


@pytest.fixture(autouse=True)
def fresh_container(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test is a new execution environment: no cached deps, nothing frozen. Deployed, a
    policy is required (docs/policy.md#settings-fail-closed): the stack always sets one."""
    monkeypatch.setenv("GPUWARDEN_CLUSTER", "ml-prod")
    policy = tmp_path / "policy.json"
    policy.write_text('{"cluster": "ml-prod"}')
    monkeypatch.setenv("GPUWARDEN_POLICY_FILE", str(policy))
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()
    _runtime.rules.cache_clear()
    gc.unfreeze()
    yield
    gc.unfreeze()
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()


def test_outside_lambda_importing_a_handler_builds_nothing(sim: KubeSim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig_path))
    import gpuwarden.handlers.interruption as module

    importlib.reload(module)  # the module's import, as a new process would run it
    assert _runtime.deps.cache_info().currsize == 0
    assert gc.get_freeze_count() == 0


def test_inside_lambda_init_builds_the_cluster_client_and_freezes_the_imports(
    sim: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a Lambda execution environment (the runtime sets AWS_LAMBDA_FUNCTION_NAME)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "gpuwarden-interruption")
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig_path))
    sim.clear_requests()
    # When the handler module is imported (the init phase)
    import gpuwarden.handlers.interruption as module

    importlib.reload(module)
    # Then the deps and the cluster client are built, the imports are out of the collector's way,
    # and nothing was asked of the cluster yet
    kube = _runtime.deps().kube
    assert isinstance(kube, Lazy)
    assert kube.built
    assert gc.get_freeze_count() > 10_000
    assert list(sim.requests) == []
    # and the deployed rules its first event parses against (the drain handler parses none)
    assert _runtime.rules.cache_info().currsize == 1
    _runtime.rules.cache_clear()
    import gpuwarden.handlers.drain as drain_module

    importlib.reload(drain_module)
    assert _runtime.rules.cache_info().currsize == 0


def test_an_unreachable_cluster_is_no_init_failure_and_the_first_event_says_why(
    sim: KubeSim, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: None
) -> None:
    # Given a Lambda environment whose cluster cannot be reached (its kubeconfig is missing)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "gpuwarden-interruption")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    import gpuwarden.handlers.interruption as module

    # When the module is imported: no exception (an init failure would have no JSON to show)
    importlib.reload(module)
    kube = _runtime.deps().kube
    assert isinstance(kube, Lazy)
    assert not kube.built
    # Then the first event fails with the reason, as its JSON result (and so into the DLQ)
    event = load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))
    with pytest.raises(HandlingFailed) as failed:
        module.handler(event, LambdaContext())
    result = failed.value.result
    assert result["outcome"] == "failed"
    assert "KUBECONFIG" in str(result["reason"]), result
