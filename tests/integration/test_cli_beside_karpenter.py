"""`gpuwarden invoke` with Karpenter's interruption handling acting through the API before and after it.

The Karpenter is the simulator's (sim/actors/karpenter.py); gpuwarden is the installed console script in a
subprocess, as a user (or a Lambda) runs it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from sim import KubeSim
from sim.actors.karpenter import DO_NOT_DISRUPT, Karpenter, MessageKind
from sim.builders import nodeclaim_for
from sim.clock import rfc3339
from tests.integration.cli_subprocess import GPUWARDEN, invoke, invoke_env, moto_endpoint, sim
from tests.integration.conftest import load_event
from tests.integration.scenarios import INSTANCE, spot_node
from tests.reliability.karpenter_race import start_when_asked

# the fixtures: a real-time simulator with acking workloads, a moto server
__all__ = ["moto_endpoint", "sim"]

REQUESTED = "gpuwarden.io/checkpoint-requested"


def with_claims(sim: KubeSim) -> list[str]:
    names = []
    for node in sim.list("Node"):
        names.append(str(sim.create(nodeclaim_for(node))["metadata"]["name"]))
    return names


def event_file(sim: KubeSim, tmp_path: Path) -> Path:
    path = tmp_path / "spot.json"
    path.write_text(json.dumps(load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))))
    return path


def test_karpenter_first_gpuwarden_leaves_the_replacement_and_protects_the_trainers(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    # Given Karpenter got the Spot warning first: it deleted the NodeClaim (its drain starts a moment later)
    scenario = spot_node(sim, modes=("annotate", "signal:SIGUSR1"), inference=1, grace=1)
    before = with_claims(sim)
    karpenter = Karpenter(sim, launch_seconds=30)
    karpenter.step()
    karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
    changes: list[tuple[str, dict[str, str]]] = []
    sim.on_change(
        lambda kind, _e, obj: (
            changes.append((obj["metadata"]["name"], dict(obj["metadata"].get("annotations") or {})))
            if kind == "Pod"
            else None
        )
    )
    # When gpuwarden handles the same warning (Karpenter's controllers start a moment after it asks)
    start_when_asked(sim, karpenter, list(scenario.trainers.values()))
    try:
        done = invoke(sim, moto_endpoint, str(event_file(sim, tmp_path)))
        result = json.loads(done.stdout)
        # Then it handled it, launched nothing, and says the replacement is Karpenter's
        assert done.returncode == 0, done.stderr
        assert result["outcome"] == "handled", result
        assert result["replacement"] == "left to Karpenter"
        assert [
            c["metadata"]["name"] for c in sim.list("NodeClaim") if c["metadata"]["name"].startswith("gpuwarden")
        ] == []
        # every trainer was marked do-not-disrupt before it was asked, and checkpointed before it left
        for key in scenario.trainers.values():
            name = key.split("/")[1]
            mine = [a for n, a in changes if n == name]
            asked = next(i for i, a in enumerate(mine) if REQUESTED in a)
            assert mine[asked].get(DO_NOT_DISRUPT) == "true", key
            evictions = [a for a in result["actions"] if a["type"] == "evict" and a.get("pod") == key]
            assert evictions, (key, result["actions"])
            assert evictions[0]["reason"] == "checkpoint acknowledged", (key, result["actions"])
        sim.wait_until(lambda: not karpenter.batching, timeout=10)
    finally:
        karpenter.stop()
    # Karpenter's provisioner places the displaced pods (here they fit on the other node): never two
    assert len([c for c in sim.list("NodeClaim") if c["metadata"]["name"] not in before]) <= 1


def test_karpenter_after_gpuwarden_counts_its_replacement_and_leaves_the_trainers_to_it(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    # Given gpuwarden gets the warning first and Karpenter's queue delivers it half a second later
    scenario = spot_node(sim, modes=("annotate", "exec:/bin/checkpoint"), inference=1, grace=1)
    before = with_claims(sim)
    karpenter = Karpenter(sim, launch_seconds=30).start()
    try:
        proc = subprocess.Popen(
            [str(GPUWARDEN), "invoke", str(event_file(sim, tmp_path))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=invoke_env(sim, moto_endpoint),
        )
        assert sim.wait_until(lambda: any(REQUESTED in _ann(sim, k) for k in scenario.trainers.values()), timeout=30)
        time.sleep(0.5)
        karpenter.deliver_interruption(INSTANCE, MessageKind.SPOT_INTERRUPTED)
        out, err = proc.communicate(timeout=90)
        result = json.loads(out)
        assert proc.returncode == 0, err
        assert result["outcome"] == "handled", result
        # Karpenter's drain left every opted-in pod to gpuwarden
        karpenter_took = {a.target for a in karpenter.actions if a.type in ("evicted", "force-deleted")}
        assert not karpenter_took & set(scenario.trainers.values()), karpenter.actions
        # one replacement: gpuwarden's, which Karpenter's provisioner counted as capacity
        assert result["replacement"].startswith("nodeclaim/")
        time.sleep(2.0)  # past Karpenter's provisioning batch window
        new = [c["metadata"]["name"] for c in sim.list("NodeClaim") if c["metadata"]["name"] not in before]
        assert new == [result["replacement"].removeprefix("nodeclaim/")], new
    finally:
        karpenter.stop()


def _ann(sim: KubeSim, key: str) -> dict[str, str]:
    ns, name = key.split("/")
    pod: dict[str, Any] = sim.get("Pod", name, ns) or {}
    return dict((pod.get("metadata") or {}).get("annotations") or {})
