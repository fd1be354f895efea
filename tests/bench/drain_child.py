"""Child of the drain benchmark: gpuwarden drains one node with its `round_of` loop.

`python -m tests.bench.drain_child NODE` with KUBECONFIG pointing at the simulator. The
notice is a `manual` drain (voluntary: evictions only, never a force-delete, PDBs obeyed —
what `kubectl drain` does). Cordon + taint first (as kubectl cordons first), then the CLI's
local driver: `round_of`, sleep the round's `wait_seconds` (real seconds, as kubectl's own
waits are), until done. Dependencies are built before the clock starts (a warm function).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

from tests.bench.common import emit, quiet_handler_logs


def main(node_name: str) -> None:
    from gpuwarden.config import Settings
    from gpuwarden.domain.notice import Kind, Notice
    from gpuwarden.services.engine.context import Recorder
    from gpuwarden.services.engine.drain import DrainState
    from gpuwarden.services.engine.node_ops import mark_node
    from gpuwarden.services.engine.pipeline import drain_to_end
    from gpuwarden.wiring import build_deps

    quiet_handler_logs()
    deps = build_deps(Settings.from_env(), caller="bench")
    now = datetime.now(UTC)
    notice = Notice(
        kind=Kind.MANUAL,
        event_id="bench-drain",
        node_name=node_name,
        event_time=now,
        source="bench",
        detail_type="runbook",
    )
    started = time.perf_counter()
    recorder = Recorder(deps, notice.event_id)
    node = deps.kube.get_node(node_name)
    if node is None:
        raise SystemExit(f"node {node_name} not found")
    mark_node(deps.kube, node, notice, voluntary=deps.voluntary_kinds)
    state = DrainState(node=node_name, event_id=notice.event_id, kind=notice.kind, started_at=deps.clock())
    state = drain_to_end(recorder, state).state
    seconds = time.perf_counter() - started
    evicted = sum(1 for a in recorder.actions if a["type"] == "evict")
    blocked = sum(1 for a in recorder.actions if a["type"] == "eviction-blocked")
    emit({"seconds": seconds, "rounds": state.round, "outcome": state.outcome, "evicted": evicted, "blocked": blocked})


if __name__ == "__main__":
    main(sys.argv[1])
