"""Child of the real-plane burst benchmark: one warm interruption Lambda taking its share of a burst.

`python -m tests.bench.realplane_child PLAN_JSON` with KUBECONFIG pointing at the real plane (as
an identity APF classifies like any workload, not an exempt admin) and AWS_ENDPOINT_URL at the
benchmark's moto (tests/bench/ec2.py). PLAN_JSON: `{"events": [[instance_id, event_id], ...],
"warm_up": instance_id}`. A warm execution environment, as Lambda keeps one between invocations:
the dependencies built and the handler's init run (`_runtime.warm`), then one earlier invocation
handled (a warning for ``warm_up``, an instance of another cluster: EC2 asked, the cluster not
touched). It answers `RESULT {"ready": true}`, then waits for one line on stdin, ``{"start": <unix
time>}`` (the moment EventBridge hands the burst over, the same for every process), and handles
its events one after another from then, as one execution environment does. Each event's cordon
and checkpoint-request times are the Recorder's `at` stamps, taken inside the real code.

With a second argument ``cold``: a cold execution environment, the one Lambda starts for the
burst. It answers ready before anything is imported, and the imports, the dependencies, the init
and the earlier invocation all come after the hand-over, inside the burst's time.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.common import EVENTS, emit, quiet_handler_logs


def _event(template: dict[str, Any], instance_id: str, event_id: str, at: datetime) -> dict[str, Any]:
    event = template | {"id": event_id, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "resources": []}
    event["detail"] = {"instance-id": instance_id, "instance-action": "terminate"}
    return event


def main(plan_file: str, cold: bool = False) -> None:
    if cold:
        emit({"ready": True, "cold": True})
        start = float(json.loads(sys.stdin.readline())["start"])
        time.sleep(max(0.0, start - time.time()))
    import gpuwarden.handlers._runtime as runtime
    import gpuwarden.handlers.interruption as handler_module
    from gpuwarden.config import Settings
    from gpuwarden.wiring import build_deps
    from tests.bench.cold_probe import _Context

    quiet_handler_logs()
    plan = json.loads(Path(plan_file).read_text())
    handoffs: list[dict[str, Any]] = []
    deps = build_deps(Settings.from_env(), caller="bench", start_drain=handoffs.append)
    setattr(runtime, "deps", lambda: deps)  # noqa: B010 - the warm container's cached deps
    runtime.warm(deps)
    template = json.loads((EVENTS / "spot-interruption.json").read_text())
    if not cold:  # a warm environment is past an earlier invocation; a cold one's first is the burst's
        earlier = handler_module.handler(_event(template, plan["warm_up"], "warm-up", datetime.now(UTC)), _Context())
        emit({"ready": True, "warm_up": earlier["outcome"]})
        start = float(json.loads(sys.stdin.readline())["start"])
        time.sleep(max(0.0, start - time.time()))  # the burst's hand-over, shared by every process
    notice = datetime.fromtimestamp(start, UTC)
    answers = []
    for instance_id, event_id in plan["events"]:
        taken = datetime.now(UTC)  # this environment takes the warning (after the ones before it)
        try:
            result = handler_module.handler(_event(template, instance_id, event_id, notice), _Context())
        except Exception as err:  # counted as lost, never hidden
            answers.append({"instance": instance_id, "outcome": f"raised {type(err).__name__}: {err}"[:300]})
            continue
        actions = result["actions"]
        answers.append(
            {
                "instance": instance_id,
                "outcome": result["outcome"],
                "taken": taken.isoformat(),
                "cordon": next((a["at"] for a in actions if a["type"] == "cordon"), None),
                "requests": [a["at"] for a in actions if a["type"] == "checkpoint-requested"],
                "signals": [a["at"] for a in actions if a["type"] == "signal"],
            }
        )
    emit({"answers": answers, "handoffs": len(handoffs)})


if __name__ == "__main__":
    main(sys.argv[1], cold=sys.argv[2:] == ["cold"])
