"""Nothing lost: a mixed stream of 1,000 events through the deployed routing, reconciled exactly.

Every event ends as a ledger record (handled / ignored / duplicate / failed; a duplicate
delivery adds to its record's `duplicates`) or on the dead-letter path (InvalidEvent).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from typing import Any

from gpuwarden.adapters.ledger import MemoryLedger
from gpuwarden.domain.errors import InvalidEvent
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.sources import NoticeBatch
from sim.builders import gpu_node, nodepool
from sim.clock import rfc3339
from tests.reliability.conftest import sim_deps
from tests.reliability.harness import EVENTS, fresh_sim

TOTAL = 1000
KNOWN = 12


def _sample(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())  # type: ignore[no-any-return]


def _for(template: dict[str, Any], instance: str, event_id: str, now: str, **detail: Any) -> dict[str, Any]:
    event = copy.deepcopy(template)
    event.update(id=event_id, time=now, resources=[f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}"])
    event["detail"] = {**event["detail"], "instance-id": instance, **detail}
    return event


def build_stream(rng: random.Random, known: list[str], now: str, stopping_known: bool) -> list[dict[str, Any] | Any]:
    spot, rebalance = _sample("spot-interruption.json"), _sample("rebalance-recommendation.json")
    state = _sample("instance-state-change-stopping.json")
    stream: list[Any] = []
    for i in range(TOTAL):
        roll = rng.random()
        unknown = f"i-{rng.getrandbits(68):017x}"[:19]
        if roll < 0.15 and stream:
            stream.append(copy.deepcopy(rng.choice([e for e in stream if isinstance(e, dict) and "id" in e] or [spot])))
        elif roll < 0.25:
            bad: Any = copy.deepcopy(rng.choice([spot, rebalance, state]))
            damage = rng.choice(["no-detail", "bad-time", "bad-instance", "not-object", "unknown-type"])
            if damage == "no-detail":
                bad.pop("detail")
            elif damage == "bad-time":
                bad["time"] = "yesterday"
            elif damage == "bad-instance":
                bad["detail"]["instance-id"] = "i-NOTHEX"
            elif damage == "unknown-type":
                bad["detail-type"] = "EC2 Something Else"
            else:
                bad = [bad]
            stream.append(bad)
        elif roll < 0.35:
            instance = rng.choice(known)
            template = rng.choice([spot, rebalance, state] if stopping_known else [spot, rebalance])
            extra = {"state": rng.choice(["stopping", "terminated", "running"])} if template is state else {}
            stream.append(_for(template, instance, f"known-{i}", now, **extra))
        else:
            template = rng.choice([spot, rebalance, state])
            extra = {"state": rng.choice(["stopping", "running", "pending"])} if template is state else {}
            stream.append(_for(template, unknown, f"unknown-{i}", now, **extra))
    return stream


def test_a_thousand_mixed_events_all_end_in_the_ledger_or_the_dead_letter_path(aws: None) -> None:
    reconcile(stopping_known=False)


def test_redelivered_instance_stopping_notices_reconcile_too(aws: None) -> None:
    reconcile(stopping_known=True)


def reconcile(stopping_known: bool) -> None:
    rng = random.Random(9)
    with fresh_sim(speed=40.0) as (sim, _workloads):
        sim.create(nodepool("gpu-training"))
        known = []
        for i in range(KNOWN):
            instance = f"i-0{i:016x}"
            sim.create(gpu_node(f"ip-10-0-9-{i}.us-west-2.compute.internal", instance))
            known.append(instance)
        ledger = MemoryLedger()
        deps = sim_deps(sim, ledger)
        stream = build_stream(rng, known, rfc3339(sim.clock.now()), stopping_known)
        dead_lettered, deliveries, ignored_before_a_notice = 0, Counter[str](), 0
        ignored_at_parse = Counter[str]()
        started = time.monotonic()
        for raw in stream:
            try:
                parsed = parse_event(raw)
            except InvalidEvent:
                dead_lettered += 1
                continue
            assert isinstance(parsed, NoticeBatch)
            result = handle_batch(parsed, deps).to_json()
            assert result["outcome"] in ("handled", "ignored", "duplicate", "failed"), result
            if not parsed.notices:  # well-formed, asks nothing of gpuwarden: recorded under its envelope id
                assert parsed.event_id is not None
                ignored_before_a_notice += 1
                ignored_at_parse[parsed.event_id] += 1
                continue
            for notice in parsed.notices:
                deliveries[notice.event_id] += 1
        elapsed = time.monotonic() - started
        # every delivery of a notice is in the ledger: once as its record, the rest as duplicates
        recorded = 0
        for event_id, count in ignored_at_parse.items():
            entry = ledger.get(event_id)
            assert entry is not None, event_id
            assert entry["outcome"] == "ignored", (event_id, entry)
            assert 1 + int(entry.get("duplicates", 0)) == count, (event_id, entry, count)
        for event_id, count in deliveries.items():
            entry = ledger.get(event_id)
            assert entry is not None, event_id
            assert entry.get("outcome") in ("handled", "ignored", "duplicate", "failed"), (event_id, entry)
            # a redelivery of an ignored event is ignored again (nothing was applied): one record per delivery
            if entry["outcome"] == "ignored":
                recorded += count
            else:
                assert 1 + int(entry.get("duplicates", 0)) == count, (event_id, entry, count)
                recorded += count
        assert recorded + ignored_before_a_notice + dead_lettered == TOTAL
        assert dead_lettered > 50
        assert elapsed < 60, elapsed
        print(
            f"\nnothing lost: {TOTAL} events, {len(deliveries)} distinct notices, {dead_lettered} dead-lettered, "
            f"{ignored_before_a_notice} ignored before a notice, {elapsed:.1f}s"
        )
