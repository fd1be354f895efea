"""The simulator accepts a burst of new connections as an API server does (no 1 s SYN retries)."""

from __future__ import annotations

import http.client
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

from sim import KubeSim


def test_a_burst_of_new_connections_is_answered_without_a_syn_retry() -> None:
    # Given the simulator and 64 clients that each open a new connection at the same moment
    with KubeSim(clock_speed=0) as sim:
        url = urlparse(sim.url)

        def get_version(_: int) -> float:
            start = time.monotonic()
            conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=5)
            try:
                conn.request("GET", "/version")
                assert conn.getresponse().status == 200
            finally:
                conn.close()
            return time.monotonic() - start

        # When they all ask for /version
        with ThreadPoolExecutor(max_workers=64) as pool:
            took = list(pool.map(get_version, range(64)))
    # Then none waited for the kernel's 1 s SYN retransmission (a listen backlog that overflowed)
    assert max(took) < 0.9, sorted(took)[-5:]
