"""The Kubernetes adapter's own behaviour, against the simulator over HTTP."""

from __future__ import annotations

import time

from gpuwarden.adapters.kube import KubeClient
from sim import KubeSim
from sim.builders import gpu_node


def test_urgent_patches_skip_the_rate_limit_that_paces_bulk_reads(sim: KubeSim) -> None:
    # Given a client limited to 2 requests/s with a burst of 1
    sim.create(gpu_node("n1", "i-0123456789abcdef0"))
    kube = KubeClient(sim.api_client(), qps=2.0, burst=1)
    node = kube.get_node("n1")  # spends the burst
    assert node is not None
    # When it cordons (PATCH) five times in a row
    began = time.monotonic()
    for i in range(5):
        node = kube.patch_node("n1", {"metadata": {"annotations": {"k": str(i)}}}, None)
    patches = time.monotonic() - began
    # and then reads three times
    began = time.monotonic()
    for _ in range(3):
        kube.get_node("n1")
    reads = time.monotonic() - began
    # Then the patches went out at once and the reads were paced at 2/s
    assert patches < 1.0
    assert reads >= 0.9  # at least two of the three waited for a token
