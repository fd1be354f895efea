from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from sim import KubeSim
from sim import builders as b


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    """A simulator with a frozen clock (time moves only with sim.clock.advance)."""
    with KubeSim(clock_speed=0) as s:
        yield s


@pytest.fixture
def core(sim: KubeSim) -> Any:
    return client.CoreV1Api(sim.api_client())


@pytest.fixture
def node(sim: KubeSim) -> dict[str, Any]:
    return sim.create(b.gpu_node("gpu-a", "i-0123456789abcdef0"))
