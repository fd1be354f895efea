"""Child of the scale benchmark: one function's execution environment at a cluster's size.

`python -m tests.bench.scale_child POLICY_JSON` with KUBECONFIG pointing at the cluster (the
simulator or the real plane) and AWS_ENDPOINT_URL at moto. Dependencies are built and the init
phase run (`_runtime.warm`) as the deployed function's init does, with a `start_drain` that only
records the hand-off; it answers `RESULT {"ready": true}`. Then each line on stdin is one
invocation, answered with one `RESULT` line:

- ``{"op": "spot", "instance": ID, "event_id": ID}``: one Spot warning (`handle_batch`);
- ``{"op": "scan"}``: one GPU-health scan (`handle_scan`, the schedule's tick);
- ``{"op": "reconcile"}``: the windows function's 5-minute reconcile (`handle_tick`);
- ``{"op": "release"}``: `gpuwarden release --all` (`handle_release`).

Each answer: the outcome, the Kubernetes requests made and the bytes of their answers (the
adapter's own counters), the seconds from the call to the first write the result records
(``first_write_ms``: its first action's ``at``) and to its return, and the process's peak
resident memory so far (``VmHWM``, `cold_probe._peak_rss_mb`: what Lambda reports as "Max Memory
Used").
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from tests.bench.cold_probe import _peak_rss_mb as _peak_mb
from tests.bench.common import EVENTS, emit, quiet_handler_logs


def _spot(instance: str, event_id: str) -> Any:
    from gpuwarden.kinds.inputs import parse_notices

    template = json.loads((EVENTS / "spot-interruption.json").read_text())
    event = template | {"id": event_id, "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "resources": []}
    event["detail"] = {"instance-id": instance, "instance-action": "terminate"}
    return parse_notices(event)


def main(policy_json: str) -> None:
    import gpuwarden.handlers._runtime as runtime
    from gpuwarden.adapters.ledger import MemoryLedger
    from gpuwarden.config import Settings
    from gpuwarden.domain.policy import Policy
    from gpuwarden.services.dispatch import handle_batch, handle_release, handle_scan, handle_tick
    from gpuwarden.sources.ticks import SchedulerTick
    from gpuwarden.wiring import build_deps

    quiet_handler_logs()
    handed: list[dict[str, Any]] = []
    policy = Policy.model_validate_json(policy_json)
    deps = build_deps(
        Settings.from_env(), caller="bench", ledger=MemoryLedger(), policy=policy, start_drain=handed.append
    )
    runtime.warm(deps)
    tally = _counted(deps.kube)
    emit({"ready": True, "peak_mb": _peak_mb()})
    for line in sys.stdin:
        message = json.loads(line)
        op = message["op"]
        tally.update(requests=0, events=0, received=0, wire=0)
        started = datetime.now(UTC)
        began = time.perf_counter()
        if op == "spot":
            result = handle_batch(_spot(message["instance"], message["event_id"]), deps, drain_locally=False)
        elif op == "scan":
            result = handle_scan(None, deps, drain_locally=False)
        elif op == "reconcile":
            result = handle_tick(SchedulerTick(action="reconcile"), deps, drain_locally=False)
        else:
            result = handle_release(deps, None)
        seconds = time.perf_counter() - began
        answer = result.to_json()
        writes = [a["at"] for a in _actions(answer) if a.get("at")]
        first = min(writes) if writes else None
        emit(
            {
                "outcome": answer["outcome"],
                "reason": answer.get("reason"),
                **tally,
                "seconds": seconds,
                "first_write_ms": (datetime.fromisoformat(first) - started).total_seconds() * 1000 if first else None,
                "peak_mb": _peak_mb(),
                "handed": len(handed),
            }
        )


def _counted(kube: Any) -> dict[str, int]:
    """Counts of the adapter's requests that reached the API server (`KubeClient._once`): all,
    the Kubernetes Events among them, the bytes of their answers (as JSON) and of the same answers
    on the wire (gzip where the server compressed them)."""
    from gpuwarden.wiring import Lazy

    client = kube.build() if isinstance(kube, Lazy) else kube
    tally = {"requests": 0, "events": 0, "received": 0, "wire": 0}
    real = client._once

    def counted(method: str, path: str, *rest: Any) -> Any:
        before = client.wire_bytes
        status, data, headers = real(method, path, *rest)
        tally["requests"] += 1
        tally["events"] += path.endswith("/events")
        tally["received"] += len(data)
        tally["wire"] += client.wire_bytes - before
        return status, data, headers

    client._once = counted
    return tally


def _actions(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Every action of a result, its nested results' too (a scan answers one result per node)."""
    found = list(answer.get("actions") or [])
    for nested in answer.get("results") or []:
        found += _actions(nested)
    return found


if __name__ == "__main__":
    main(sys.argv[1])
