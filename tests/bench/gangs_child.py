"""Child of the gang benchmark: a warm interruption handler taking the events its parent sends.

`python -m tests.bench.gangs_child` with KUBECONFIG pointing at the simulator, which runs in the
parent (as tests/bench/latency.py does: the handler in its own interpreter, as a Lambda is, so it
never shares a lock or a core's turn with the API server it talks to).

Dependencies are built once and the init phase run (`_runtime.warm`), as in a warm execution
environment, with a `start_drain` that only records the hand-off, as the deployed Step Functions
start would; it answers `RESULT {"ready": true}`. Then each line on stdin is one message,
`{"event": <EventBridge event>, "blocks": [{"id": ..., "end": ...}]}` (``blocks``: Capacity
Blocks EC2 would describe from now on), handled with `handle_batch` as the interruption function
does; its answer is one `RESULT` line: the notice time, taken before the event is parsed, and the
result as JSON (its actions carry the real clock's `at` of each step).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from tests.bench.common import emit, quiet_handler_logs


def main() -> None:
    from moto import mock_aws

    import gpuwarden.handlers._runtime as runtime
    from gpuwarden.config import Settings
    from gpuwarden.kinds.inputs import parse_notices
    from gpuwarden.services.dispatch import handle_batch
    from gpuwarden.wiring import build_deps
    from sim.actors.capacity_reservations import Block, CapacityReservations

    quiet_handler_logs()
    handoffs: list[dict[str, Any]] = []
    with mock_aws():
        deps = build_deps(Settings.from_env(), caller="bench", start_drain=handoffs.append)
        blocks = CapacityReservations()
        blocks.attach(deps.cloud.ec2)  # type: ignore[attr-defined]
        runtime.warm(deps)
        emit({"ready": True})
        for line in sys.stdin:
            message = json.loads(line)
            for block in message.get("blocks") or ():
                blocks.add(Block(block["id"], datetime.fromisoformat(block["end"])))
            notice = datetime.now(UTC)
            result = handle_batch(parse_notices(message["event"]), deps, drain_locally=False).to_json()
            emit({"notice": notice.isoformat(), "result": result, "handoffs": len(handoffs)})


if __name__ == "__main__":
    main()
