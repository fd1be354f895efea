"""gpuwarden and Karpenter's interruption handling on one Spot warning, in any order.

One run: a Spot node with opted-in trainers (signal, exec, annotate), plain pods behind a PDB, a
DaemonSet and a mirror pod, a NodeClaim for each node; gpuwarden runs in-process (the real
services and adapters over HTTP to the simulator) and `sim.actors.karpenter.Karpenter` runs its
controllers on its own thread. Where Karpenter receives the warning is chosen exactly: before
gpuwarden's first API call, or just before its k-th call (a proxy of gpuwarden's Kubernetes
port delivers it), or after gpuwarden has finished. A duplicate delivery and a crash (the
process's port dies at call c; the event is delivered again) can be mixed in.

The invariant, checked on every run from the simulator's own record of writes:
- no opted-in pod gpuwarden asked is removed (by anyone) before its acknowledgement or the time
  it was asked to checkpoint by; a pod whose template carries do-not-disrupt is never removed
  before that in any order;
- at most one replacement NodeClaim exists for the interrupted node.
A trainer Karpenter evicted before gpuwarden could mark it (Karpenter strictly first, pod
without do-not-disrupt in its template) is counted, not excused silently; so is one whose eviction
Karpenter decided on a version of the pod older than gpuwarden's mark and sent after it (no
precondition of the Eviction API can stop an eviction already decided: docs/reliability.md,
"Long runs").
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim import KubeSim
from sim.actors.karpenter import DO_NOT_DISRUPT, Karpenter
from sim.builders import nodeclaim_for
from sim.wiring import sim_deps
from tests.reliability.harness import NODE, OTHER, REQUESTED, Cluster, Observer, build_cluster, fresh_sim, spot_event

DONE = "gpuwarden.io/checkpoint-done"
SPEED = 20.0


class Crash(BaseException):
    """The process died: every later call of its ports fails (nothing in gpuwarden catches it)."""


@dataclass(frozen=True)
class Race:
    """One interleaving."""

    seed: int = 0
    #: gpuwarden's Kubernetes call before which Karpenter receives the warning (0: before gpuwarden
    #: starts; None: after gpuwarden finished)
    karpenter_at: int | None = 0
    #: Karpenter strictly first: it finishes its first drain pass before gpuwarden starts
    karpenter_settles_first: bool = False
    #: Karpenter's controllers lag: they start only once gpuwarden has asked every trainer
    karpenter_lags: bool = False
    #: Karpenter receives the warning this many real seconds after gpuwarden has asked every trainer
    karpenter_after: float | None = None
    queue: bool = True
    ack_delay: float = 1.0
    silent: tuple[int, ...] = ()  # trainers (by index) that never acknowledge
    #: Simulated seconds (SPEED x real). 60 (3 s of real time) so that a loaded CI machine's thread
    #: scheduling cannot time out a workload that acks after `ack_delay`; the randomized runs pick
    #: their own (5, 10, 20) and check only the invariant, never that every trainer acked.
    checkpoint_timeout: int = 60
    termination_grace: str | None = None
    dnd_template: tuple[int, ...] = ()  # trainers whose template carries do-not-disrupt
    #: trainers that tolerate every taint (karpenter.sh/disrupted too): Karpenter's drain does not wait for them
    tolerate_all: tuple[int, ...] = ()
    duplicate_at: int | None = None  # a second delivery of the same event starts at this call
    crash_at: int | None = None  # the first delivery's process dies at this call (then redelivered)
    #: The simulator's clock speed. A scene that asserts which of two timed things comes first (Karpenter's
    #: termination before a checkpoint timeout) runs slower, so that its margin in real seconds is wider
    #: than a loaded machine's thread scheduling: at 20x the 60 s timeout is 3 real seconds, at 4x 15.
    speed: float = SPEED

    @staticmethod
    def random(seed: int) -> Race:
        """One interleaving drawn from ``seed``: Karpenter before gpuwarden (a fifth of the runs, half
        of them with its first drain pass done), after it (a sixth), or before one of its first 40
        API calls; a duplicate delivery in a third of the runs, a crash in a quarter."""
        rng = random.Random(seed)
        trainers = range(3)
        where = rng.random()
        karpenter_at = 0 if where < 0.2 else None if where < 0.37 else rng.randrange(1, 40)
        return Race(
            seed=seed,
            karpenter_at=karpenter_at,
            karpenter_settles_first=karpenter_at == 0 and rng.random() < 0.5,
            queue=rng.random() < 0.9,
            ack_delay=rng.choice([0.2, 1.0, 3.0, 8.0]),
            silent=tuple(i for i in trainers if rng.random() < 0.25),
            checkpoint_timeout=rng.choice([5, 10, 20]),
            termination_grace=rng.choice([None, None, "10m"]),
            dnd_template=tuple(i for i in trainers if rng.random() < 0.3),
            tolerate_all=tuple(i for i in trainers if rng.random() < 0.1),
            duplicate_at=rng.randrange(0, 30) if rng.random() < 0.33 else None,
            crash_at=rng.randrange(1, 30) if rng.random() < 0.25 else None,
        )


@dataclass
class Outcome:
    race: Race
    results: list[dict[str, Any]] = field(default_factory=list)
    replacements: list[str] = field(default_factory=list)
    taken_before_mark: list[str] = field(default_factory=list)  # evicted by Karpenter before gpuwarden could ask
    lost_with_node: list[str] = field(default_factory=list)  # still on the node when Karpenter removed it
    checkpointed: list[str] = field(default_factory=list)
    node_gone: bool = False
    karpenter_actions: list[str] = field(default_factory=list)
    #: pod -> the resourceVersion Karpenter's eviction queue decided its eviction on
    karpenter_evictions: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        outcomes = [(r.get("outcome"), (r.get("drain") or {}).get("outcome")) for r in self.results]
        return (
            f"{self.race}: results {outcomes}, replacements {self.replacements}, "
            f"checkpointed {self.checkpointed}, taken before gpuwarden's mark {self.taken_before_mark}, "
            f"lost with the node {self.lost_with_node}, "
            f"node gone {self.node_gone}, Karpenter's actions {self.karpenter_actions}"
        )


class InterleavedKube:
    """gpuwarden's Kubernetes port, with something run just before its chosen calls."""

    def __init__(self, inner: Any, counter: Callable[[], int], before: dict[int, Callable[[], None]]) -> None:
        self._inner = inner
        self._counter = counter
        self._before = before
        self.dead_from: int | None = None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            n = self._counter()
            if self.dead_from is not None and n >= self.dead_from:
                raise Crash(f"process died before call {n} ({name})")
            hook = self._before.pop(n, None)
            if hook is not None:
                hook()
            return attr(*args, **kwargs)

        return call


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _setup(sim: KubeSim, race: Race) -> tuple[Cluster, set[str]]:
    cluster = build_cluster(sim, grace=3, checkpoint_timeout=race.checkpoint_timeout)
    claims: set[str] = set()
    for name in (NODE, OTHER):
        node = sim.get("Node", name)
        assert node is not None
        claim = nodeclaim_for(node)
        if race.termination_grace:
            claim["spec"]["terminationGracePeriod"] = race.termination_grace
        claims.add(str(sim.create(claim)["metadata"]["name"]))
    for i in race.dnd_template:
        ns, name = cluster.trainers[i].split("/")
        sim.patch_direct("Pod", name, {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}}, ns)
    for i in race.tolerate_all:
        ns, name = cluster.trainers[i].split("/")
        sim.patch_direct("Pod", name, {"spec": {"tolerations": [{"operator": "Exists"}]}}, ns)
    return cluster, claims


def when_asked(sim: KubeSim, trainers: list[str], then: Callable[[], object]) -> None:
    """Call ``then`` (once, on its own thread) when gpuwarden has asked every trainer to checkpoint."""
    asked: set[str] = set()
    lock = threading.Lock()

    def on_change(kind: str, _event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind != "Pod" or key not in trainers or REQUESTED not in _annotations(obj):
            return
        with lock:
            first_time = key not in asked and asked | {key} == set(trainers)
            asked.add(key)
        if first_time:
            threading.Thread(target=then, daemon=True).start()

    sim.on_change(on_change)


def start_when_asked(sim: KubeSim, karpenter: Karpenter, trainers: list[str]) -> None:
    """Start Karpenter's controllers once gpuwarden has asked every trainer (its reconcile lagging)."""
    when_asked(sim, trainers, karpenter.start)


def _deliver(deps: Any, event: dict[str, Any], results: list[dict[str, Any]]) -> None:
    try:
        results.append(handle_batch(parse_notices(event), deps, drain_locally=True).to_json())
    except Crash:
        results.append({"outcome": "crashed"})
    except GpuwardenError as err:
        results.append({"outcome": "failed", "reason": str(err)})
    except Exception as err:  # on a delivery thread it would only be a warning: make it the test's failure
        results.append({"outcome": "raised", "reason": repr(err)})


def run_race(race: Race) -> Outcome:
    """Play one interleaving to the end and check the invariant (AssertionError names the seed)."""
    real = SPEED / race.speed  # real-time waits below were sized for SPEED
    with fresh_sim(speed=race.speed, ack_delay=race.ack_delay) as (sim, workloads):
        cluster, before_claims = _setup(sim, race)
        workloads.silent.update(cluster.trainers[i] for i in race.silent)
        observer = Observer(sim)
        karpenter = Karpenter(sim, interruption_queue=race.queue, launch_seconds=20, batch_idle_seconds=SPEED)
        karpenter.step()  # registration: the termination finalizer on both nodes
        event = spot_event(sim.clock.now(), id=f"race-{race.seed}")
        out = Outcome(race)

        def karpenter_receives() -> None:
            karpenter.deliver_event(event)

        if race.karpenter_at == 0:
            karpenter_receives()
            if race.karpenter_settles_first:
                karpenter.settle()
        if race.karpenter_lags:
            start_when_asked(sim, karpenter, cluster.trainers)
        else:
            karpenter.start()
        timer = threading.Timer(race.karpenter_after or 0.0, karpenter_receives)
        if race.karpenter_after is not None:
            when_asked(sim, cluster.trainers, timer.start)
        calls = iter(range(1, 1_000_000))
        lock = threading.Lock()

        def counter() -> int:
            with lock:
                return next(calls)

        hooks: dict[int, Callable[[], None]] = {}
        if race.karpenter_at:
            hooks[race.karpenter_at] = karpenter_receives
        threads: list[threading.Thread] = []
        first = sim_deps(sim, caller="race")
        kube = InterleavedKube(first.kube, counter, hooks)
        kube.dead_from = race.crash_at
        first.kube = kube
        if race.duplicate_at is not None:
            second = sim_deps(sim, caller="race-dup")
            second.kube = InterleavedKube(second.kube, counter, hooks)
            start_dup = threading.Thread(target=_deliver, args=(second, event, out.results))
            at = race.duplicate_at or 1
            hooks[at if at not in hooks else at + 1] = start_dup.start
            threads.append(start_dup)
        _deliver(first, event, out.results)
        if out.results and out.results[0].get("outcome") == "crashed":
            _deliver(sim_deps(sim, caller="race-redelivery"), event, out.results)  # the queue redelivers
        for t in threads:
            if t.ident is not None:
                t.join(timeout=120)
        if timer.is_alive():
            timer.join()
        for n in list(hooks):  # Karpenter after gpuwarden finished (or a call index never reached)
            hook = hooks.pop(n, None)  # popped, as InterleavedKube pops: the duplicate runs once
            if hook is not None:
                hook()
        for t in threads:
            if t.ident is not None:
                t.join(timeout=120)
        out.node_gone = sim.wait_until(
            lambda: sim.get("Node", cluster.node) is None, timeout=20 * real if race.queue else 0.5 * real
        )
        sim.wait_until(lambda: not karpenter.batching, timeout=5 * real)  # its provisioner's window closes
        karpenter.stop()
        out.karpenter_actions = [f"{a.at.strftime('%H:%M:%S.%f')[:12]} {a.type} {a.target}" for a in karpenter.actions]
        out.karpenter_evictions = {a.target: int(a.decided_on) for a in karpenter.actions if a.decided_on}
        out.replacements = sorted(
            str(c["metadata"]["name"]) for c in sim.list("NodeClaim") if c["metadata"]["name"] not in before_claims
        )
        check(observer, cluster, out)
        return out


def check(observer: Observer, cluster: Cluster, out: Outcome) -> None:
    why = f"seed {out.race.seed}: {out.describe()}"
    with observer._lock:
        node_writes = [w for w in observer.writes if w.kind == "Node" and w.key == cluster.node]
    node_gone_at = next((w.seq for w in node_writes if w.event == "DELETED"), None)
    assert all(r.get("outcome") not in ("failed", "raised") for r in out.results), why
    assert len(out.replacements) <= 1, f"more than one replacement: {why}"
    for i, key in enumerate(cluster.trainers):
        gone = observer.removal(key)
        if gone is None:
            continue
        earlier = [w for w in observer.pod_writes(key) if w.seq < gone.seq]
        asked = next((w for w in earlier if REQUESTED in _annotations(w.obj)), None)
        acked = any(DONE in _annotations(w.obj) for w in earlier)
        if acked:
            out.checkpointed.append(key)
        if node_gone_at is not None and gone.seq > node_gone_at:
            out.lost_with_node.append(key)  # the pod garbage collector, after Karpenter removed the node
            continue
        if asked is None:
            assert i not in out.race.dnd_template, f"{key} (do-not-disrupt in its template) removed unasked: {why}"
            out.taken_before_mark.append(key)
            continue
        by = isoparse(_annotations(asked.obj)[REQUESTED])
        if acked or gone.at >= by:
            continue
        decided = out.karpenter_evictions.get(key)
        marked = int(asked.obj["metadata"]["resourceVersion"])
        if gone.path.endswith("/eviction") and decided is not None and decided < marked:
            out.taken_before_mark.append(key)  # Karpenter decided before the mark; its eviction landed after
            continue
        removed_by = f"{gone.method or 'the simulator'} {gone.path}".rstrip()  # which request: who took it
        raise AssertionError(f"{key} removed at {gone.at} by {removed_by} before its ack or {by}: {why}")


def removal_times(observer: Observer, keys: list[str]) -> dict[str, datetime | None]:
    return {k: (w.at if (w := observer.removal(k)) else None) for k in keys}
