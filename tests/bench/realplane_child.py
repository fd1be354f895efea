"""Child of the real-plane mass benchmark: one warm interruption Lambda taking its share of a burst.

`python -m tests.bench.realplane_child PLAN_JSON` with KUBECONFIG pointing at the real plane (as
an identity APF classifies like any workload, not an exempt admin). PLAN_JSON: `{"start": <unix
time>, "events": [[instance_id, event_id], ...]}`. Dependencies are built once and the handler
warmed (Lambda's init) before `start`; at `start` (the moment EventBridge hands the burst over) it
handles its events one after another, as one execution environment does. Each event's cordon and
signal times are the Recorder's `at` stamps, taken inside the real code.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.common import EVENTS, emit, quiet_handler_logs


def main(plan_file: str) -> None:
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
    template = json.loads((EVENTS / "spot-interruption.json").read_text())
    time.sleep(max(0.0, float(plan["start"]) - time.time()))  # the burst's hand-over, shared by every process
    notice = datetime.fromtimestamp(float(plan["start"]), UTC)
    answers = []
    for instance_id, event_id in plan["events"]:
        event = template | {"id": event_id, "time": notice.strftime("%Y-%m-%dT%H:%M:%SZ"), "resources": []}
        event["detail"] = {"instance-id": instance_id, "instance-action": "terminate"}
        try:
            result = handler_module.handler(event, _Context())
        except Exception as err:  # counted as lost, never hidden
            answers.append({"instance": instance_id, "outcome": f"raised {type(err).__name__}: {err}"[:300]})
            continue
        actions = result["actions"]
        answers.append(
            {
                "instance": instance_id,
                "outcome": result["outcome"],
                "cordon": next((a["at"] for a in actions if a["type"] == "cordon"), None),
                "requests": [a["at"] for a in actions if a["type"] == "checkpoint-requested"],
                "signals": [a["at"] for a in actions if a["type"] == "signal"],
            }
        )
    emit({"answers": answers, "handoffs": len(handoffs)})


if __name__ == "__main__":
    main(sys.argv[1])
