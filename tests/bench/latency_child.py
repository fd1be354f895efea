"""Child of the latency benchmark: a warm interruption handler taking one Spot warning per node.

`python -m tests.bench.latency_child RUNS_JSON` with KUBECONFIG pointing at the simulator.
RUNS_JSON lists `[instance_id, event_id]` pairs; the first is a warm-up. Dependencies are
built once (as `handlers._runtime.deps` does in a warm container) with a `start_drain` that
only records the hand-off, as the deployed Step Functions start would. The notice time is
taken right before the handler is called; cordon and signal times are the Recorder's `at`
stamps (the real clock), taken inside the real code when each step finished.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.common import EVENTS, emit, quiet_handler_logs


def _ms(later: str, earlier: datetime) -> float:
    return (datetime.fromisoformat(later) - earlier).total_seconds() * 1000


def main(runs_file: str) -> None:
    import gpuwarden.handlers._runtime as runtime
    import gpuwarden.handlers.interruption as handler_module
    from gpuwarden.config import Settings
    from gpuwarden.wiring import build_deps
    from tests.bench.cold_probe import _Context

    quiet_handler_logs()
    handoffs: list[dict[str, Any]] = []
    deps = build_deps(Settings.from_env(), caller="bench", start_drain=handoffs.append)
    # the warm container's cached deps: every handler takes them through _runtime.invocation_deps
    setattr(runtime, "deps", lambda: deps)  # noqa: B010
    template = json.loads((EVENTS / "spot-interruption.json").read_text())
    samples: list[dict[str, float]] = []
    for instance_id, event_id in json.loads(Path(runs_file).read_text()):
        notice = datetime.now(UTC)
        event = template | {"id": event_id, "time": notice.strftime("%Y-%m-%dT%H:%M:%SZ"), "resources": []}
        event["detail"] = {"instance-id": instance_id, "instance-action": "terminate"}
        result = handler_module.handler(event, _Context())
        returned = datetime.now(UTC)
        actions = result["actions"]
        cordon = next(a["at"] for a in actions if a["type"] == "cordon")
        signals = [a["at"] for a in actions if a["type"] == "signal"]
        samples.append(
            {
                "cordon_ms": _ms(cordon, notice),
                "last_signal_ms": max(_ms(s, notice) for s in signals),
                "signals": len(signals),
                "returned_ms": (returned - notice).total_seconds() * 1000,
            }
        )
    emit({"samples": samples[1:], "warmup": samples[0], "handoffs": len(handoffs)})


if __name__ == "__main__":
    main(sys.argv[1])
