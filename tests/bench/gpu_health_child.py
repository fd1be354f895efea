"""Child of the GPU-health benchmark: the GPU function's warm execution environment.

`python -m tests.bench.gpu_health_child POLICY_JSON NOW` with KUBECONFIG pointing at the simulator,
which runs in the parent (as tests/bench/latency.py and gangs.py do: a Lambda never shares an
interpreter, its lock or its garbage collector with the API server it talks to).

Dependencies are built once and the init phase run (`_runtime.warm`: the cluster client built,
the imports frozen out of the collector's sight), as in the deployed function's init, with a
`start_drain` that only records the hand-off, as the deployed Step Functions start would; it
answers `RESULT {"ready": true}`. Then each line on stdin is one invocation:

- ``{"op": "scan", "now": ISO}``: one scan (`handle_scan`, the schedule's tick);
- ``{"op": "alerts", "now": ISO, "event": SNS_EVENT, "policy": POLICY}``: one Alertmanager
  notification (`handle_alerts`), under that policy from now on.

``now`` (and NOW) is the simulator's clock when the parent sent the line: the child's clock runs
on from it in real time (the simulator's runs at speed 1). Each answer is one `RESULT` line: when the
handler was called (`time.time()`, the parent's clock too), how long it took, and its result.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta
from typing import Any

from tests.bench.common import emit, quiet_handler_logs


def main(policy_json: str, now: str) -> None:
    import gpuwarden.handlers._runtime as runtime
    from gpuwarden.adapters.ledger import MemoryLedger
    from gpuwarden.config import Settings
    from gpuwarden.kinds.registry import POLICY
    from gpuwarden.services.dispatch import handle_alerts, handle_scan
    from gpuwarden.sources import parse_sns
    from gpuwarden.wiring import build_deps

    quiet_handler_logs()
    handed: list[dict[str, Any]] = []
    deps = build_deps(
        Settings.from_env(),
        caller="bench",
        ledger=MemoryLedger(),
        policy=POLICY.model_validate_json(policy_json),
        start_drain=handed.append,
    )
    sim_now: list[tuple[datetime, float]] = [(datetime.fromisoformat(now), time.time())]

    def clock() -> datetime:
        at, wall = sim_now[-1]
        return at + timedelta(seconds=time.time() - wall)

    deps.clock = deps.window_clock = clock
    runtime.warm(deps)
    emit({"ready": True})
    for line in sys.stdin:
        message = json.loads(line)
        sim_now.append((datetime.fromisoformat(message["now"]), time.time()))
        if message["op"] == "alerts":
            deps.policy = POLICY.model_validate(message["policy"])
        started = time.time()
        began = time.perf_counter()
        if message["op"] == "scan":
            result = handle_scan(None, deps, drain_locally=False)
        else:
            result = handle_alerts(parse_sns(message["event"]), deps, drain_locally=False)
        seconds = time.perf_counter() - began
        emit({"started": started, "seconds": seconds, "result": result.to_json(), "handed": len(handed)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
