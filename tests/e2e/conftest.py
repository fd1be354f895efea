"""The e2e suite: gpuwarden against a real control plane and real Karpenter (docs/realplane.md).

One plane for the session (``plane``), started from the binaries ``make setup-real`` built; each
component's log, the API server's audit log and the `kill`s a `signal:` checkpoint ran stay in
test-artifacts/realplane/. A scene leaves the plane as it found it (its namespaces deleted, its
NodeClaims gone) so the next scene starts from an empty cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from realplane.aws import AwsWorld, start_moto
from realplane.build import pins
from realplane.plane.harness import Plane
from tests.e2e.world import ARTIFACTS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
    # the scenes on another Karpenter pin last: the session's plane starts once, theirs once after it
    items.sort(key=lambda item: _pin_of(item) is not None)


def _pin_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    pin: str | None = callspec.params.get("plane") if callspec is not None else None
    return pin


#: The Karpenter pins a scene marked ``every_karpenter`` runs on, by pins.toml section: the plane's
#: own (``None``: the same plane as every other scene's) and the oldest release gpuwarden supports.
KARPENTER_PINS = (None, "karpenter-oldest")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A scene marked ``every_karpenter`` runs once on each Karpenter pin (docs/realplane.md,
    "Karpenter versions"): ``plane`` parametrized for the session, so each pin's plane starts once
    and the scenes of one pin run together (pytest orders a session parameter's tests by value)."""
    if "plane" in metafunc.fixturenames and metafunc.definition.get_closest_marker("every_karpenter"):
        pinned = pins.load_pins()
        ids = [f"karpenter-{pinned[pin or 'karpenter']['version']}" for pin in KARPENTER_PINS]
        metafunc.parametrize("plane", KARPENTER_PINS, indirect=True, scope="session", ids=ids)


@pytest.fixture(scope="session")
def plane(request: pytest.FixtureRequest) -> Iterator[Plane]:
    """The plane of the session; of another Karpenter pin for a scene parametrized with it
    (its logs in test-artifacts/realplane/<pin>/)."""
    pin: str | None = getattr(request, "param", None)
    if pin is None:
        with Plane(artifacts=ARTIFACTS) as running:
            yield running
    else:
        with Plane(artifacts=ARTIFACTS / pin, karpenter_pin=pin) as running:
            yield running


def _mark_audit(request: pytest.FixtureRequest) -> None:
    """Each scene reads only its own requests (`Plane.mark_audit`): names repeat across scenes on
    one plane. Marked by the two autouse fixtures below, before any of the scene's fixtures, so no
    scene can forget it; a test that does not use the session's plane does not start it."""
    if "plane" in request.fixturenames:
        plane: Plane = request.getfixturevalue("plane")
        plane.mark_audit()


@pytest.fixture(scope="module", autouse=True)
def _module_audit(request: pytest.FixtureRequest) -> None:
    """A scene built once for its module (a module-scoped fixture) starts here: autouse fixtures
    come first within their scope, so this one runs before it."""
    _mark_audit(request)


@pytest.fixture(autouse=True)
def _scene_audit(request: pytest.FixtureRequest) -> None:
    """A scene built by its test (scene_cluster, a function-scoped fixture) starts here."""
    _mark_audit(request)


@pytest.fixture(scope="session")
def aws() -> Iterator[AwsWorld]:
    with start_moto() as world:
        yield world
