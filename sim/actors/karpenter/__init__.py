"""Karpenter, as its source says it behaves, acting on the simulator through its HTTP API.

Its controllers, one module each over one shared client (`cluster.Cluster`), as Karpenter splits them:
`interruption`, `lifecycle` (NodeClaims), `termination` (nodes and the eviction queue), `provisioning`.
`Karpenter` here runs them together, in Karpenter's reconcile order.

Modelled on (read from the source, not guessed):

- aws/karpenter-provider-aws ``pkg/controllers/interruption``: Spot, scheduled-change (AWS Health,
  service EC2, category scheduledChange), state-change (stopping, stopped, shutting-down, terminated)
  and capacity-reservation messages are "cordon and drain": the NodeClaim is deleted at once.
  Instance/system status messages are "forceful": the termination timestamp is set to now first.
  A Spot message marks the offering (instance type, zone, spot) unavailable for later launches.
- kubernetes-sigs/karpenter ``pkg/controllers/nodeclaim/lifecycle``: the finalizer
  ``karpenter.sh/termination`` on every NodeClaim; a deleting NodeClaim gets
  ``karpenter.sh/nodeclaim-termination-timestamp`` = deletionTimestamp + ``spec.terminationGracePeriod``
  (when set), deletes its Node, waits for it to go, terminates the instance, drops its finalizer.
  Registration puts the same finalizer on the Node.
- ``pkg/controllers/node/termination`` (controller, terminator, eviction queue): a deleting Node is
  tainted ``karpenter.sh/disrupted:NoSchedule``; every pod that does not tolerate that taint, is
  not a mirror pod and is not stuck terminating waits for eviction; pods go in tiers (non-critical
  non-DaemonSet first); the queue evicts through ``pods/eviction`` with a UID precondition, retries
  429 (PDB) with per-item exponential backoff (100 ms .. 10 s), passes over pods with an active
  ``karpenter.sh/do-not-disrupt`` (they stall the drain), and deletes any pod whose grace period
  would outlast the termination timestamp with the grace left (>= 1 s). Drained = nothing waits for
  5 s; then the instance is terminated and the Node's finalizer removed.
- ``pkg/controllers/provisioning``: pods on deleting nodes (and pending pods) are scheduled
  against existing schedulable nodes and in-flight NodeClaims (a NodeClaim someone else created
  counts); only what does not fit gets a new NodeClaim from the NodePool's template.

Deviations, on purpose: reads and writes go through the simulator's HTTP API like any client,
but reads are always fresh (no informer lag); the scheduling simulation counts only
``nvidia.com/gpu`` (CPU and memory are assumed to fit); a launched instance becomes a Ready Node
after ``launch_seconds`` and a terminated one is gone after ``terminate_seconds`` (sim time).
Pods left on a Node Karpenter finished are removed as the pod garbage collector would.

Use::

    karpenter = Karpenter(sim, interruption_queue=True)
    karpenter.step()                      # one reconcile of every controller, on the sim clock
    karpenter.deliver_interruption("i-0abc…", MessageKind.SPOT_INTERRUPTED)
    karpenter.settle()                    # step until nothing more happens at this sim time
    karpenter.start() … karpenter.stop()  # or let a thread react to every write
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sim.actors.karpenter.cluster import Cluster
from sim.actors.karpenter.installs import karpenter_deployment, karpenter_global_settings, termination_handler
from sim.actors.karpenter.interruption import InterruptionController
from sim.actors.karpenter.lifecycle import LifecycleController
from sim.actors.karpenter.messages import MessageKind, parse_message
from sim.actors.karpenter.objects import (
    DO_NOT_DISRUPT,
    FINALIZER,
    GPUS,
    NODECLAIMS,
    NODEPOOL_LABEL,
    NODES,
    TERMINATION_TIMESTAMP,
    KarpenterAction,
    Obj,
    do_not_disrupt_active,
    go_duration,
    meta_of,
)
from sim.actors.karpenter.provisioning import Provisioner
from sim.actors.karpenter.termination import TerminationController
from sim.apiserver.errors import ApiError

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim

__all__ = [
    "DO_NOT_DISRUPT",
    "FINALIZER",
    "GPUS",
    "NODEPOOL_LABEL",
    "TERMINATION_TIMESTAMP",
    "Karpenter",
    "KarpenterAction",
    "MessageKind",
    "do_not_disrupt_active",
    "go_duration",
    "karpenter_deployment",
    "karpenter_global_settings",
    "parse_message",
    "termination_handler",
]

_RUNNING: weakref.WeakKeyDictionary[KubeSim, Karpenter] = weakref.WeakKeyDictionary()


@dataclass
class Karpenter:
    """Karpenter's interruption, NodeClaim lifecycle, node termination, eviction queue and
    provisioner controllers. ``interruption_queue`` is the ``INTERRUPTION_QUEUE`` setting: when
    False, :meth:`deliver_interruption` does nothing (the rest of Karpenter still runs)."""

    sim: KubeSim
    interruption_queue: bool = True
    launch_seconds: float = 45.0
    terminate_seconds: float = 5.0
    provision: bool = True
    #: BATCH_IDLE_DURATION: the provisioner waits this long (sim seconds) after pods first need
    #: a home before it launches (Karpenter's default is 1 s of wall time: at clock speed s, pass s)
    batch_idle_seconds: float = 1.0
    actions: list[KarpenterAction] = field(default_factory=list)
    #: (instance type, zone, capacity type) marked unavailable by Spot interruptions
    unavailable: set[tuple[str, str, str]] = field(default_factory=set)
    on_action: Callable[[KarpenterAction], None] | None = None
    cluster: Cluster = field(init=False)
    interruption: InterruptionController = field(init=False)
    lifecycle: LifecycleController = field(init=False)
    termination: TerminationController = field(init=False)
    provisioner: Provisioner = field(init=False)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.cluster = Cluster(self.sim, self, self.actions, self.unavailable, self.on_action)
        self.lifecycle = self.make_lifecycle(self.cluster)
        self.termination = TerminationController(self.cluster)
        self.provisioner = self.make_provisioner(self.cluster)
        self.interruption = InterruptionController(self.cluster, self.provisioner.displaced)

    def make_lifecycle(self, cluster: Cluster) -> LifecycleController:
        return LifecycleController(cluster)

    def make_provisioner(self, cluster: Cluster) -> Provisioner:
        return Provisioner(cluster)

    @property
    def replacements(self) -> dict[str, list[str]]:
        """Deleting NodeClaim -> the NodeClaims the provisioner created while its pods needed a home."""
        return self.provisioner.replacements

    # ------------------------------------------------------------------ running

    @staticmethod
    def running_on(sim: KubeSim) -> Karpenter | None:
        """The started Karpenter of ``sim`` (the demo's scenes share one)."""
        return _RUNNING.get(sim)

    def start(self) -> Karpenter:
        """React to every write (and to due timers) in a background thread until :meth:`stop`."""
        _RUNNING[self.sim] = self
        if self._thread is None:
            self.sim.on_change(lambda *_: self._wake.set())
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="karpenter", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if _RUNNING.get(self.sim) is self:
            del _RUNNING[self.sim]
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wake.set()
            thread.join(timeout=5)
        self.cluster.close()

    def __enter__(self) -> Karpenter:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                did = self.step()
            except (ApiError, OSError):
                did = []  # a failed call is retried on the next pass, as a requeue would
            if did:
                continue
            self._wake.wait(self._idle_wait())
            self._wake.clear()

    def _idle_wait(self) -> float:
        due = self.due_times()
        real = [self.sim.clock.real_seconds_until(t) for t in due]
        return min([0.25, *(r for r in real if r is not None)]) or 0.001

    # ------------------------------------------------------------------ public API

    def due_times(self) -> list[datetime]:
        """When the stand-in has work of its own coming (sim time): each queued eviction's next
        try, the end of each instance termination it started, and the close of an open
        provisioning batch."""
        with self._lock:
            due = self.termination.queue_due() + self.cluster.terminations_due()
            if self.provisioner.need_since is not None:
                due.append(self.provisioner.need_since + timedelta(seconds=self.batch_idle_seconds))
            return due

    def drain_times(self) -> list[datetime]:
        """When a deleting Node's drain changes with time alone (`TerminationController.wake_times`):
        for a driver that steps the stand-in on its own clock instead of polling it."""
        with self._lock:
            return self.termination.wake_times(self.cluster.items(NODES), self.cluster.items(NODECLAIMS))

    def step(self, now: datetime | None = None) -> list[KarpenterAction]:
        """One reconcile of every controller at ``now`` (default: the sim clock); what it did."""
        with self._lock:
            now = now or self.sim.clock.now()
            start = len(self.actions)
            claims = self.cluster.items(NODECLAIMS)
            nodes = self.cluster.items(NODES)
            self.lifecycle.register(claims, nodes, now)
            for claim in claims:
                self.lifecycle.reconcile(claim, nodes, now)
            for node in nodes:
                if meta_of(node).get("deletionTimestamp") and FINALIZER in (meta_of(node).get("finalizers") or []):
                    self.termination.finalize(node, claims, now)
            self.termination.run_queue(now)
            if self.provision:
                self.provisioner.provision(now)
            return self.actions[start:]

    def settle(self, max_steps: int = 50) -> list[KarpenterAction]:
        """Step until a step does nothing (at the current sim time)."""
        done: list[KarpenterAction] = []
        for _ in range(max_steps):
            did = self.step()
            if not did:
                break
            done += did
        return done

    def deliver_interruption(self, instance_id: str, kind: MessageKind | str) -> list[KarpenterAction]:
        """Handle one interruption message for ``instance_id`` as the interruption controller does
        (nothing when the queue is off or the message asks for no action)."""
        kind = MessageKind(kind)
        with self._lock:
            start = len(self.actions)
            if not self.interruption_queue:
                return []
            self.interruption.deliver(instance_id, kind, self.sim.clock.now())
            return self.actions[start:]

    def deliver_event(self, event: Obj) -> list[KarpenterAction]:
        """An EventBridge event as it would reach Karpenter's SQS queue."""
        parsed = parse_message(event)
        if parsed is None:
            return []
        kind, instances = parsed
        return [a for instance in instances for a in self.deliver_interruption(instance, kind)]

    @property
    def batching(self) -> bool:
        """The provisioner has pods waiting for its batch window to close."""
        return self.provisioner.need_since is not None

    def created_nodeclaims(self) -> list[str]:
        """Every NodeClaim the provisioner created."""
        return [n for names in self.replacements.values() for n in names]
