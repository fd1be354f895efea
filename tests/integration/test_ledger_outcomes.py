"""One ledger entry per answer, written in one place (engine/result.py: `answered` via `record_result`).

Every outcome path a notice or a tick can take ends in the ledger under its event id, with the
outcome and reason of the answer: handled, ignored (for each kind of reason: at parse time, not
ours, held by another event, nothing to act on), duplicate (counted on the record), dry-run,
failed; and a redelivery that finishes what a failed delivery began ends as `handled`, with the
failure kept as history.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices, parse_scheduler_tick
from gpuwarden.services.dispatch import handle_batch, handle_tick
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.inputs import spot_warning
from tests.integration.scenarios import spot_node

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "gpuwarden"


def deliver(world: World, event: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    return handle_batch(parse_notices(event), world.deps(dry_run=dry_run)).to_json()


def entry(world: World, event_id: str) -> dict[str, Any]:
    found = world.ledger.get(event_id)
    assert found is not None, f"no ledger entry for {event_id}"
    return found


# --------------------------------------------------------------------------- ignored, each reason

Ignored = Callable[[World], dict[str, Any]]


def _instance_running(world: World) -> dict[str, Any]:
    event = load_event("instance-state-change-stopping.json")
    event["detail"] = {**event["detail"], "state": "running"}
    return event


def _cpu_alarm(world: World) -> dict[str, Any]:
    return load_event("cloudwatch-alarm-state-change-cpu.json")


def _health_closed(world: World) -> dict[str, Any]:
    event = load_event("health-scheduled-maintenance.json")
    event["detail"] = {**event["detail"], "statusCode": "closed"}
    return event


def _not_ours(world: World) -> dict[str, Any]:
    event = spot_warning(world)
    event["detail"] = {**event["detail"], "instance-id": "i-0000000000000beef"}
    event["resources"] = ["arn:aws:ec2:us-west-2:123456789012:instance/i-0000000000000beef"]
    return event


def _held_by_another_event(world: World) -> dict[str, Any]:
    deliver(world, spot_warning(world, id="an-earlier-warning"))
    return load_event("rebalance-recommendation.json", time=rfc3339(world.sim.clock.now()))


def _block_with_no_node(world: World) -> dict[str, Any]:
    return load_event("capacity-block-expiration-warning.json")


IGNORED: dict[str, tuple[Ignored, str]] = {
    "not a loss of the instance (at parse)": (_instance_running, r"entered state 'running'"),
    "not a GPU alarm (at parse)": (_cpu_alarm, r"."),
    "a closed Health event (at parse)": (_health_closed, r"is closed"),
    "an instance not in the cluster": (_not_ours, r"."),
    "a node another event holds": (
        _held_by_another_event,
        r"already being handled for spot-interruption \(an-earlier-warning\)",
    ),
    "a Capacity Block with no node here": (_block_with_no_node, r"no node of cluster"),
}


@pytest.mark.parametrize("path", sorted(IGNORED))
def test_every_ignored_answer_is_one_ledger_entry_with_its_reason(world: World, path: str) -> None:
    # Given an event gpuwarden will not act on, for this reason
    spot_node(world.sim)
    build, reason = IGNORED[path]
    event = build(world)
    # When it is delivered, then delivered again
    first = deliver(world, event)
    again = deliver(world, event)
    # Then the answer is ignored, and its one ledger entry says so with the same reason
    assert first["outcome"] == again["outcome"] == "ignored", first
    assert re.search(reason, first["reason"]), first["reason"]
    ids = [first.get("event_id") or event["id"]]
    recorded = entry(world, ids[0]) if world.ledger.get(ids[0]) else None
    if recorded is None:  # a notice keyed by its target (several instances in one event)
        ids = [k for k in world.ledger.entries if k.startswith(event["id"])]
        assert len(ids) == 1, world.ledger.entries
        recorded = entry(world, ids[0])
    assert recorded["outcome"] == "ignored"
    assert recorded["reason"] == first["reason"]
    assert recorded["caller"] == "test"
    # and the second delivery is counted on that entry, not written as another
    assert int(recorded["duplicates"]) == 1, recorded


# --------------------------------------------------------------------------- the other outcomes


def test_a_handled_notice_is_one_entry_and_its_redelivery_is_counted_as_a_duplicate(world: World) -> None:
    spot_node(world.sim)
    event = spot_warning(world)
    first = deliver(world, event)
    second = deliver(world, event)
    assert (first["outcome"], second["outcome"]) == ("handled", "duplicate")
    recorded = entry(world, event["id"])
    assert recorded["outcome"] == "handled"
    assert recorded["reason"] == first["reason"]
    assert int(recorded["duplicates"]) == 1
    assert "history" not in recorded


def test_a_dry_run_is_recorded_as_dry_run(world: World) -> None:
    spot_node(world.sim)
    event = spot_warning(world)
    result = deliver(world, event, dry_run=True)
    assert result["outcome"] == "dry-run"
    assert entry(world, event["id"])["outcome"] == "dry-run"


def test_a_failed_notice_is_recorded_as_failed_with_what_failed(world: World) -> None:
    # Given the API server drops every connection
    spot_node(world.sim)
    world.sim.faults.inject(reset=True)
    event = spot_warning(world)
    result = deliver(world, event)
    assert result["outcome"] == "failed"
    recorded = entry(world, event["id"])
    assert recorded["outcome"] == "failed"
    assert recorded["reason"] == result["reason"]
    assert recorded["reason"].startswith("no cluster reachable"), recorded


def test_a_redelivery_that_finishes_after_a_partial_failure_is_handled_with_the_failure_as_history(
    world: World,
) -> None:
    # Given a Spot warning whose first delivery cordoned the node, then was refused (403: retrying
    # cannot fix it, so it is not handed on to the drain workflow) listing its pods
    scenario = spot_node(world.sim)
    world.sim.faults.inject(status=403, method="GET", path=r"/api/v1/pods", count=1)
    event = spot_warning(world)
    first = deliver(world, event)
    assert first["outcome"] == "failed", first
    assert world.node(scenario.node)["spec"].get("unschedulable") is True  # the cordon was done
    assert [a["type"] for a in first["actions"]] == ["cordon"], first  # and the failed answer keeps it
    assert first["node"] == scenario.node, first
    # When the event is delivered again (EventBridge / Lambda's async retry) and finishes the work
    second = deliver(world, event)
    # Then that answer is handled, not duplicate, and the ledger keeps the failure as history
    assert second["outcome"] == "handled", second
    assert second["reason"].startswith("resumed after a failed delivery"), second["reason"]
    recorded = entry(world, event["id"])
    assert recorded["outcome"] == "handled"
    assert recorded["history"].startswith("failed"), recorded
    assert first["reason"] in recorded["history"]
    # and a third delivery is a duplicate of a handled answer
    assert deliver(world, event)["outcome"] == "duplicate"
    assert entry(world, event["id"])["outcome"] == "handled"


def test_a_tick_answer_is_recorded_under_its_plan_or_execution(world: World) -> None:
    spot_node(world.sim)
    due = parse_scheduler_tick(
        {"gpuwarden": "budget-window", "action": "maintenance-due", "plan_id": "maint-gone", "execution_id": "x-1"}
    )
    result = handle_tick(due, world.deps())
    assert result.outcome == "ignored"
    assert entry(world, "maint-gone")["outcome"] == "ignored"
    reconcile = parse_scheduler_tick({"gpuwarden": "budget-window", "action": "reconcile", "execution_id": "x-2"})
    answer = handle_tick(reconcile, world.deps(Policy(cluster="ml-prod")))
    assert answer.event_id is not None
    assert entry(world, answer.event_id)["outcome"] == answer.outcome


def test_a_failed_tick_is_recorded_as_failed(world: World) -> None:
    world.sim.faults.inject(reset=True)
    due = parse_scheduler_tick(
        {"gpuwarden": "budget-window", "action": "maintenance-due", "plan_id": "maint-1", "execution_id": "x-3"}
    )
    result = handle_tick(due, world.deps())
    assert result.outcome == "failed"
    assert entry(world, "maint-1")["outcome"] == "failed"


# --------------------------------------------------------------------------- one place


def test_answers_are_written_to_the_ledger_only_by_the_result_module() -> None:
    """`record_result` is called from engine/result.py only; every other ledger write is a state
    record of its own key (a plan, a NodePool's saved fields, a runbook request), never an answer."""
    calls, writes = [], []
    for path in [*(PACKAGE / "services").rglob("*.py"), *(PACKAGE / "kinds").rglob("*.py")]:
        text = path.read_text()
        rel = path.relative_to(PACKAGE / "services" if "services" in path.parts else PACKAGE).as_posix()
        if re.search(r"\brecord_result\(", text) and rel != "engine/result.py":
            calls.append(rel)
        for match in re.finditer(r"ledger\.(record|count_duplicate)\(\s*([^,]+),", text):
            writes.append((rel, match.group(2).strip()))
    assert calls == []
    answers = [(rel, key) for rel, key in writes if rel != "engine/result.py"]
    # the state records, each under a key of its own kind
    assert {rel for rel, _ in answers} <= {
        "kinds/scheduled_maintenance/use_case.py",
        "kinds/capacity_blocks/use_case.py",
        "kinds/karpenter_expiry/use_case.py",
        "windows/windows.py",
        "runbook/actions.py",
    }, answers
    for rel, key in answers:
        assert "event_id" not in key or rel == "runbook/actions.py", (rel, key)
