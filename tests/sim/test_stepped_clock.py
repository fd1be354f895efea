"""The clock that moves only when the code sleeps (sim/stepped.py): what falls due runs inside the
sleep that reaches it, in time order, each at its own instant, and nothing moves in between."""

from __future__ import annotations

import time
from datetime import timedelta

from sim import KubeSim
from sim import builders as b
from sim.actors.workloads import DONE, REQUESTED, Workloads
from sim.clock import rfc3339
from sim.stepped import EPOCH, SteppedClock


def test_timed_actions_run_inside_the_sleep_in_time_order_at_their_own_instant() -> None:
    clock = SteppedClock()
    ran: list[tuple[str, float]] = []

    def note(name: str) -> None:
        ran.append((name, clock.elapsed()))

    clock.call_later(5, lambda: note("five"))
    clock.call_later(2, lambda: note("two"))
    clock.call_later(8, lambda: note("eight"))
    dropped = clock.call_later(3, lambda: note("cancelled"))
    dropped.cancel()
    time.sleep(0.02)  # real time passes: sim time does not
    assert clock.now() == EPOCH
    assert ran == []
    clock.sleep(6)
    assert ran == [("two", 2.0), ("five", 5.0)]
    assert clock.now() == EPOCH + timedelta(seconds=6)
    clock.sleep(2)
    assert ran[-1] == ("eight", 8.0)


def test_an_action_scheduled_by_an_action_runs_in_the_same_sleep_when_due() -> None:
    clock = SteppedClock()
    ran: list[float] = []
    clock.call_later(1, lambda: clock.call_later(1.5, lambda: ran.append(clock.elapsed())))
    clock.sleep(3)
    assert ran == [2.5]


def test_a_grace_period_ends_inside_the_sleep_that_reaches_it() -> None:
    clock = SteppedClock()
    with KubeSim(clock=clock) as sim:
        node = sim.create(b.gpu_node("gpu-a", "i-0abc1234def567890"))
        sim.create(b.pod("web-0", node, namespace="serving", grace=5))
        sim.delete_direct("Pod", "web-0", "serving")
        time.sleep(0.1)  # the reaper thread does not move a stepped clock nor reap on it
        clock.sleep(4.9)
        assert sim.get("Pod", "web-0", "serving") is not None
        clock.sleep(0.1)
        assert sim.get("Pod", "web-0", "serving") is None  # no wait: gone before sleep returned


def test_a_workload_acknowledges_after_its_delay_inside_the_sleep() -> None:
    clock = SteppedClock()
    with KubeSim(clock=clock) as sim:
        workloads = Workloads(sim, delay=20.0).install()
        node = sim.create(b.gpu_node("gpu-a", "i-0abc1234def567890"))
        sim.create(b.training_pod("train-0", node, checkpoint="annotate"))
        sim.patch_direct("Pod", "train-0", {"metadata": {"annotations": {REQUESTED: rfc3339(clock.now())}}}, "ml")
        clock.sleep(19)
        assert workloads.acked == []
        clock.sleep(2)
        pod = sim.get("Pod", "train-0", "ml")
        assert pod is not None
        assert pod["metadata"]["annotations"][DONE] == rfc3339(EPOCH + timedelta(seconds=20))
