"""What a service run carries: its ports, policy and clock, and the record of what it did."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import KubeError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.ports import CloudPort, HttpPort, KubePort, LedgerPort, SchedulerPort
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.observability import logger, put

T = TypeVar("T")
R = TypeVar("R")

#: Runs ``fn`` over ``items`` side by side, at most ``max_workers`` at once; the answers in ``items``' order.
SideBySide = Callable[[Callable[[Any], Any], Sequence[Any], int], list[Any]]


def in_threads(fn: Callable[[Any], Any], items: Sequence[Any], max_workers: int) -> list[Any]:
    """`Deps.side_by_side` deployed and locally: a thread pool for the call."""
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items)))) as pool:
        return list(pool.map(fn, items))


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class FanOut:
    """The nodes one notice disrupts side by side in this process (a Capacity Block's, docs/training-jobs.md):
    each node's run asks its own node's pods; a gang's pods on a node outside them are asked by the
    first run to reach them. Without it each run would try every pod of the gang, and all but one
    of those writes would lose the race for the pod's request (409, re-read, nothing to do)."""

    nodes: frozenset[str]
    _taken: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sent: set[str] = field(default_factory=set)
    _read: dict[str, Any] = field(default_factory=dict)
    _reading: dict[str, threading.Lock] = field(default_factory=dict)
    _all_sent: threading.Event = field(default_factory=threading.Event)

    def once(self, key: str, read: Callable[[], T]) -> T:
        """``read()`` once for the whole fan-out (a gang's LIST: every node's run of one block asks
        the same gang at the same moment); a read that fails is not kept, the next caller reads."""
        with self._lock:
            lock = self._reading.setdefault(key, threading.Lock())
        with lock:
            if key not in self._read:
                self._read[key] = read()
            return cast("T", self._read[key])

    def sent(self, node: str) -> None:
        """``node``'s run has its checkpoint requests out (or stopped before asking anything)."""
        with self._lock:
            self._sent.add(node)
            if self._sent >= self.nodes:
                self._all_sent.set()

    def wait_all_sent(self, seconds: float) -> None:
        """Until every run of the fan-out has its requests out: the replacements wait for them."""
        self._all_sent.wait(seconds)

    def asks_elsewhere(self, pod: PodView) -> bool:
        """Whether this run asks ``pod``, a gang member on another node than its own."""
        if pod.node_name in self.nodes:
            return False  # that node's own run asks it, with what the kind adds on a doomed node
        with self._lock:
            first = pod.key not in self._taken
            self._taken.add(pod.key)
        return first


@dataclass
class Deps:
    kube: KubePort
    cloud: CloudPort
    ledger: LedgerPort
    http: HttpPort
    policy: Policy
    #: The kinds that are voluntary (ask the windows, never override a PDB, honour do-not-disrupt),
    #: as their specs say (gpuwarden/kinds/): a node's mark names its kind, and a run asks this.
    voluntary_kinds: frozenset[str]
    #: The Karpenter disruption reason each voluntary kind counts as under a NodePool's budgets, from
    #: the node's pods (its spec's ``karpenter_reason``); a kind not here names none (docs/cluster.md).
    karpenter_reasons: Mapping[str, Callable[[Sequence[PodView]], str]] = field(default_factory=dict)
    clock: Callable[[], datetime] = utcnow
    #: The clock for window decisions: GPUWARDEN_NOW when set (docs/policy.md), else `clock`.
    window_clock: Callable[[], datetime] = utcnow
    sleep: Callable[[float], None] = time.sleep
    dry_run: bool = False
    caller: str = "gpuwarden"
    #: Starts the deployed drain workflow; None locally (the CLI loops in-process).
    start_drain: Callable[[dict[str, Any]], None] | None = None
    #: One-time EventBridge Scheduler schedules (maintenance plans); None locally.
    scheduler: SchedulerPort | None = None
    #: Seconds this invocation may still wait (its remaining time minus a safety margin), set per
    #: invocation by the Lambda handlers; None locally, where the CLI waits as long as it takes.
    remaining: Callable[[], float] | None = None
    #: How runs that each may sleep (`sleep`) go side by side: a Capacity Block's nodes, a GPU scan's.
    #: A thread pool (`in_threads`); the outcome runs give their engine's, which counts each run as one
    #: of its actors, so its clock moves only when every one of them sleeps (docs/simulate.md).
    side_by_side: SideBySide = in_threads

    def each(self, fn: Callable[[T], R], items: Sequence[T], max_workers: int) -> list[R]:
        """``fn`` over ``items`` side by side (`side_by_side`), the answers in ``items``' order."""
        return cast(list[R], self.side_by_side(fn, items, max_workers))

    def is_voluntary(self, kind: str) -> bool:
        """Whether ``kind`` is voluntary (a kind this version does not know is not)."""
        return kind in self.voluntary_kinds

    def time_left(self, wanted: float) -> float:
        """``wanted`` seconds of waiting, cut to what the invocation has left (never below 0)."""
        if self.remaining is None:
            return wanted
        return max(0.0, min(wanted, self.remaining()))

    @property
    def out_of_time(self) -> bool:
        return self.remaining is not None and self.remaining() <= 0


#: Worker threads of one invocation: checkpoint deliveries, replacement, evictions in a round.
POOL_SIZE = 16


def worker_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=POOL_SIZE)


@dataclass
class Recorder:
    """Every step, in order: into the JSON result, a structured log line, a metric, and a
    Kubernetes Event on the node (one per reason per flush, naming the pods). It records actions
    and logs, nothing else: a run's progress is passed and answered as values (`Ran`, `Round`,
    `Looks`)."""

    deps: Deps
    event_id: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    _pending: dict[tuple[str, ActionType], list[str]] = field(default_factory=dict)
    _nodes: dict[str, NodeView] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, type_: ActionType, node: NodeView | None = None, **details: Any) -> dict[str, Any]:
        """Record one step; with ``node``, its Kubernetes Event (if the type has one) goes out at `flush`."""
        action = {"type": type_, "at": self.deps.clock().isoformat(), **details}
        with self._lock:
            self.actions.append(action)
            if node is not None and type_.event_reason is not None:
                key = (node.name, type_)
                self._pending.setdefault(key, []).append(_describe(action))
                self._nodes[node.name] = node
        logger.info(type_.value, extra={"event_id": self.event_id, **details})
        if type_.metric is not None and not self.deps.dry_run:
            put(type_.metric)
        return action

    def flush(self) -> None:
        """Post the buffered Kubernetes Events. An Event that fails to post is logged, never fatal."""
        with self._lock:
            pending, self._pending = self._pending, {}
        # a dry run's kube port imagines the Event (observe mode posts it as "Would…": adapters/dry_run.py)
        for (node_name, type_), lines in pending.items():
            node = self._nodes[node_name]
            message = lines[0] if len(lines) == 1 else f"{len(lines)} pods: " + "; ".join(lines)
            reason = type_.event_reason or type_.value
            try:
                self.deps.kube.create_node_event(node, reason, message, type_.warning)
            except KubeError as err:  # an Event is a courtesy: the step itself is done
                logger.warning("event not posted", extra={"reason": reason, "error": str(err)})


def _describe(action: dict[str, Any]) -> str:
    parts = [str(action[k]) for k in ("pod", "target", "reason") if action.get(k)]
    return " ".join(parts) if parts else str(action["type"])
