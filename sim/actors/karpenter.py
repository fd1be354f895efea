"""Karpenter, as its source says it behaves, acting on the simulator through its HTTP API.

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

import hashlib
import http.client
import json
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from sim.actors.controllers import tolerates
from sim.apiserver.errors import ApiError
from sim.builders import gpu_node
from sim.clock import parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim

Obj = dict[str, Any]

FINALIZER = "karpenter.sh/termination"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT: Obj = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
EXCLUDE_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
GPU = "nvidia.com/gpu"
INSTANCE_TYPE, ZONE = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone"
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
MIN_DRAIN_SECONDS = 5.0
EVICTION_BASE_DELAY, EVICTION_MAX_DELAY = 0.1, 10.0
MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
CRITICAL = ("system-cluster-critical", "system-node-critical")
#: GPUs per instance type, for the scheduling simulation (default 8)
GPUS = {"g5.xlarge": 1, "g5.2xlarge": 1, "g5.12xlarge": 4, "g6.12xlarge": 4, "g6e.12xlarge": 4, "g5.48xlarge": 8}
USER_AGENT = "karpenter/v1.8.0 (kubesim)"


class MessageKind(StrEnum):
    """The interruption message kinds of karpenter-provider-aws (``messages.Kind``)."""

    SPOT_INTERRUPTED = "spot_interrupted"
    SCHEDULED_CHANGE = "scheduled_change"
    INSTANCE_STOPPED = "instance_stopped"
    INSTANCE_TERMINATED = "instance_terminated"
    CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
    REBALANCE_RECOMMENDATION = "rebalance_recommendation"
    INSTANCE_STATUS = "instance_status"
    SYSTEM_STATUS = "system_status"


CORDON_AND_DRAIN = frozenset(
    {
        MessageKind.SPOT_INTERRUPTED,
        MessageKind.SCHEDULED_CHANGE,
        MessageKind.INSTANCE_STOPPED,
        MessageKind.INSTANCE_TERMINATED,
        MessageKind.CAPACITY_RESERVATION_INTERRUPTED,
    }
)
FORCEFUL = frozenset({MessageKind.INSTANCE_STATUS, MessageKind.SYSTEM_STATUS})
_STOPPED_STATES = {"stopping": MessageKind.INSTANCE_STOPPED, "stopped": MessageKind.INSTANCE_STOPPED}
_GONE_STATES = {"shutting-down": MessageKind.INSTANCE_TERMINATED, "terminated": MessageKind.INSTANCE_TERMINATED}


def parse_message(event: Obj) -> tuple[MessageKind, list[str]] | None:
    """An EventBridge event as Karpenter's parsers read it: (kind, instance ids), or None
    when Karpenter ignores it (another source, a state it does not react to, another service)."""
    detail = event.get("detail") or {}
    source, detail_type = event.get("source"), event.get("detail-type")
    if source == "aws.health" and detail_type == "AWS Health Event":
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return None
        ids = [str(e.get("entityValue")) for e in detail.get("affectedEntities") or []]
        return MessageKind.SCHEDULED_CHANGE, ids
    if source != "aws.ec2":
        return None
    instance = [str(detail.get("instance-id"))]
    if detail_type == "EC2 Spot Instance Interruption Warning":
        return MessageKind.SPOT_INTERRUPTED, instance
    if detail_type == "EC2 Instance Rebalance Recommendation":
        return MessageKind.REBALANCE_RECOMMENDATION, instance
    if detail_type == "EC2 Capacity Reservation Instance Interruption Warning":
        return MessageKind.CAPACITY_RESERVATION_INTERRUPTED, instance
    if detail_type == "EC2 Instance State-change Notification":
        state = str(detail.get("state", "")).lower()
        kind = _STOPPED_STATES.get(state) or _GONE_STATES.get(state)
        return (kind, instance) if kind else None
    return None


@dataclass(frozen=True)
class KarpenterAction:
    """One thing Karpenter did (or tried), on the sim clock."""

    at: datetime
    type: str  # nodeclaim-deleted, node-deleted, tainted, evicted, eviction-blocked, force-deleted, drained,
    # instance-terminating, node-finalized, nodeclaim-finalized, nodeclaim-created, launched, pod-gc
    target: str  # "ns/pod", node or NodeClaim name
    detail: str = ""


@dataclass
class _QueueItem:
    deadline: datetime | None
    next_try: datetime
    failures: int = 0


# --------------------------------------------------------------------------- small readers


def go_duration(text: str) -> timedelta:
    """A Go ``time.ParseDuration`` string ("90s", "1h30m", "2m0.5s") as a timedelta."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return timedelta(seconds=sum(float(n) * units[u] for n, u in parts))


def _meta(obj: Obj) -> Obj:
    return dict(obj.get("metadata") or {})


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _owned_by(pod: Obj, api_version: str, kind: str) -> bool:
    return any(
        r.get("apiVersion") == api_version and r.get("kind") == kind for r in _meta(pod).get("ownerReferences") or []
    )


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _terminating(pod: Obj) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def _active(pod: Obj) -> bool:
    return not _terminal(pod) and not _terminating(pod)


def _mirror(pod: Obj) -> bool:
    return _owned_by(pod, "v1", "Node")


def _daemon(pod: Obj) -> bool:
    return _owned_by(pod, "apps/v1", "DaemonSet")


def _tolerates_disrupted(pod: Obj) -> bool:
    return tolerates(pod, DISRUPTED_TAINT)


def do_not_disrupt_active(pod: Obj, now: datetime) -> bool:
    """``IsDoNotDisruptActive``: "true", or a positive duration not yet outlived by the pod."""
    value = (_meta(pod).get("annotations") or {}).get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    try:
        span = go_duration(value)
    except ValueError:
        return False  # an invalid value counts as absent
    started = (pod.get("status") or {}).get("startTime")
    return span > timedelta(0) and (started is None or now - parse_rfc3339(started) < span)


def drainable(pod: Obj, now: datetime) -> bool:
    """``IsWaitingEviction``: not terminal, not tolerating the disrupted taint, not stuck
    terminating (over a minute past its deletionTimestamp), not a mirror pod."""
    stuck = _terminating(pod) and now - parse_rfc3339(_meta(pod)["deletionTimestamp"]) > timedelta(minutes=1)
    return not _terminal(pod) and not _tolerates_disrupted(pod) and not stuck and not _mirror(pod)


def evictable(pod: Obj, now: datetime) -> bool:
    return _active(pod) and not _tolerates_disrupted(pod) and not _mirror(pod) and not do_not_disrupt_active(pod, now)


def needs_force_delete(pod: Obj, deadline: datetime | None, now: datetime) -> bool:
    """Delete (not evict) once the pod's own grace would outlast the termination timestamp."""
    if deadline is None:
        return False
    if _terminating(pod):
        return parse_rfc3339(_meta(pod)["deletionTimestamp"]) > deadline
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return grace is not None and now > deadline - timedelta(seconds=int(grace))


def gpu_request(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += int((res.get("requests") or {}).get(GPU) or (res.get("limits") or {}).get(GPU) or 0)
    return total


def _instance_id(provider_id: str) -> str:
    return provider_id.rsplit("/", 1)[-1]


def _requirements(spec: Obj) -> dict[str, list[str]]:
    """Per key with an `In`, the values every requirement on it allows: the `In`s intersected, less
    the `NotIn`s (requirements are ANDed: karpenter pkg/scheduling `Requirements.Add`)."""
    allowed: dict[str, list[str]] = {}
    for r in spec.get("requirements") or []:
        if r.get("operator") == "In":
            values = [str(v) for v in r.get("values") or []]
            allowed[r["key"]] = [v for v in allowed[r["key"]] if v in values] if r["key"] in allowed else values
    return {k: [v for v in vs if v not in _excluded(spec, k)] for k, vs in allowed.items()}


def _excluded(spec: Obj, key: str) -> set[str]:
    return {
        str(v)
        for r in spec.get("requirements") or []
        if r.get("key") == key and r.get("operator") == "NotIn"
        for v in r.get("values") or []
    }


# --------------------------------------------------------------------------- HTTP


class _Client:
    """A minimal JSON client of the simulator (keep-alive, one connection, Karpenter's user agent)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json", "Authorization": "Bearer sim-token"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self._conn.request(method, path, body=data, headers=headers)
                response = self._conn.getresponse()
                raw = response.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        answer = json.loads(raw) if raw else {}
        if response.status >= 400:
            raise ApiError(response.status, str(answer.get("message", "")), answer.get("reason"), answer.get("details"))
        return answer

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODES = "/api/v1/nodes"


def _pod_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}"


# --------------------------------------------------------------------------- the controllers

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
    #: deleting NodeClaim -> the NodeClaims the provisioner created while its pods needed a home
    replacements: dict[str, list[str]] = field(default_factory=dict)
    on_action: Callable[[KarpenterAction], None] | None = None
    _queue: dict[tuple[str, str, str], _QueueItem] = field(default_factory=dict)
    _terminating: dict[str, datetime] = field(default_factory=dict)  # instance id -> termination began
    _registered: set[str] = field(default_factory=set)
    _launched: int = 0
    _need_since: datetime | None = None
    _batch: dict[str, Obj] = field(default_factory=dict)  # uid -> pod, as first seen needing a home
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _client: _Client | None = None

    # ------------------------------------------------------------------ lifecycle

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
        if self._client is not None:
            self._client.close()

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
        if self._need_since is not None:
            due.append(self._need_since + timedelta(seconds=self.batch_idle_seconds))
        real = [self.sim.clock.real_seconds_until(t) for t in due]
        return min([0.25, *(r for r in real if r is not None)]) or 0.001

    # ------------------------------------------------------------------ public API

    def due_times(self) -> list[datetime]:
        """When the stand-in has work of its own coming (sim time): each queued interruption
        message's next try and the end of each instance termination it started."""
        with self._lock:
            due = [item.next_try for item in self._queue.values()]
            return due + [t + timedelta(seconds=self.terminate_seconds) for t in self._terminating.values()]

    def step(self, now: datetime | None = None) -> list[KarpenterAction]:
        """One reconcile of every controller at ``now`` (default: the sim clock); what it did."""
        with self._lock:
            now = now or self.sim.clock.now()
            start = len(self.actions)
            claims = self._list(NODECLAIMS)
            nodes = self._list(NODES)
            self._register(claims, nodes, now)
            for claim in claims:
                self._reconcile_claim(claim, nodes, now)
            for node in nodes:
                if _meta(node).get("deletionTimestamp") and FINALIZER in (_meta(node).get("finalizers") or []):
                    self._finalize_node(node, claims, now)
            self._run_queue(now)
            if self.provision:
                self._provision(now)
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
            now = self.sim.clock.now()
            start = len(self.actions)
            if not self.interruption_queue:
                return []
            for claim in self._list(NODECLAIMS):
                if _instance_id(str((claim.get("status") or {}).get("providerID", ""))) == instance_id:
                    self._interrupt(claim, kind, now)
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
        return self._need_since is not None

    def created_nodeclaims(self) -> list[str]:
        """Every NodeClaim the provisioner created."""
        return [n for names in self.replacements.values() for n in names]

    # ------------------------------------------------------------------ plumbing

    def _http(self) -> _Client:
        if self._client is None:
            self._client = _Client(self.sim.url)
        return self._client

    def _list(self, path: str, field_selector: str | None = None) -> list[Obj]:
        query = f"?fieldSelector={quote(field_selector)}" if field_selector else ""
        return list(self._http().call("GET", path + query).get("items") or [])

    def _get(self, path: str) -> Obj | None:
        try:
            return dict(self._http().call("GET", path))
        except ApiError as err:
            if err.code == 404:
                return None
            raise

    def _record(self, now: datetime, type_: str, target: str, detail: str = "") -> None:
        action = KarpenterAction(now, type_, target, detail)
        self.actions.append(action)
        if self.on_action is not None:
            self.on_action(action)

    def _patch(self, path: str, body: Obj, content_type: str = "application/merge-patch+json") -> bool:
        """A patch; False when it lost an optimistic-lock race (409) or the object is gone (404)."""
        try:
            self._http().call("PATCH", path, body, content_type)
        except ApiError as err:
            if err.code in (404, 409):
                return False
            raise
        return True

    def _delete(self, path: str, options: Obj | None = None) -> bool:
        try:
            self._http().call("DELETE", path, options or {})
        except ApiError as err:
            if err.code == 404:
                return False
            raise
        return True

    # ------------------------------------------------------------------ interruption

    def _interrupt(self, claim: Obj, kind: MessageKind, now: datetime) -> None:
        name = claim["metadata"]["name"]
        labels = _meta(claim).get("labels") or {}
        if kind == MessageKind.SPOT_INTERRUPTED:
            offering = (
                labels.get("node.kubernetes.io/instance-type", ""),
                labels.get("topology.kubernetes.io/zone", ""),
            )
            if all(offering):
                self.unavailable.add((*offering, "spot"))
        if kind in FORCEFUL and TERMINATION_TIMESTAMP not in (_meta(claim).get("annotations") or {}):
            self._patch(f"{NODECLAIMS}/{name}", {"metadata": {"annotations": {TERMINATION_TIMESTAMP: rfc3339(now)}}})
        acts = kind in CORDON_AND_DRAIN or kind in FORCEFUL
        if acts and not _meta(claim).get("deletionTimestamp") and self._delete(f"{NODECLAIMS}/{name}"):
            self._record(now, "nodeclaim-deleted", name, kind.value)
            self._displace(claim)

    def _displace(self, claim: Obj) -> None:
        """The pods of a node marked for deletion go into the provisioner's batch at once: evicted
        or not, their controllers bring them back as pending pods that need this capacity."""
        node = (claim.get("status") or {}).get("nodeName")
        if not node:
            return
        for pod in self._list("/api/v1/pods", f"spec.nodeName={node}"):
            if gpu_request(pod) > 0 and self._needs_home(pod, {str(node)}):
                self._batch.setdefault(pod["metadata"]["uid"], pod)

    # ------------------------------------------------------------------ NodeClaim lifecycle

    def _register(self, claims: list[Obj], nodes: list[Obj], now: datetime) -> None:
        """Registration's finalizer on each NodeClaim's Node (once per Node, as registration runs once)."""
        by_provider = {(n.get("spec") or {}).get("providerID"): n for n in nodes}
        for claim in claims:
            node = by_provider.get((claim.get("status") or {}).get("providerID"))
            if node is None or node["metadata"]["name"] in self._registered or _meta(node).get("deletionTimestamp"):
                continue
            self._registered.add(node["metadata"]["name"])
            finalizers = _meta(node).get("finalizers") or []
            if FINALIZER not in finalizers:
                meta = {"finalizers": [*finalizers, FINALIZER], "resourceVersion": node["metadata"]["resourceVersion"]}
                self._patch(f"{NODES}/{node['metadata']['name']}", {"metadata": meta})

    def _reconcile_claim(self, claim: Obj, nodes: list[Obj], now: datetime) -> None:
        meta = _meta(claim)
        path = f"{NODECLAIMS}/{meta['name']}"
        if meta.get("deletionTimestamp"):
            self._finalize_claim(claim, nodes, now)
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            body = {
                "finalizers": [*(meta.get("finalizers") or []), FINALIZER],
                "resourceVersion": meta["resourceVersion"],
            }
            self._patch(path, {"metadata": body})
        status = claim.get("status") or {}
        created = parse_rfc3339(meta["creationTimestamp"])
        if not status.get("providerID") and now >= created + timedelta(seconds=self.launch_seconds):
            self._launch(claim, now)

    def _finalize_claim(self, claim: Obj, nodes: list[Obj], now: datetime) -> None:
        meta = _meta(claim)
        name, path = meta["name"], f"{NODECLAIMS}/{meta['name']}"
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        grace = (claim.get("spec") or {}).get("terminationGracePeriod")
        if grace and TERMINATION_TIMESTAMP not in (meta.get("annotations") or {}):
            at = parse_rfc3339(meta["deletionTimestamp"]) + go_duration(str(grace))
            body = {"annotations": {TERMINATION_TIMESTAMP: rfc3339(at)}, "resourceVersion": meta["resourceVersion"]}
            if not self._patch(path, {"metadata": body}):
                return
        provider = (claim.get("status") or {}).get("providerID")
        mine = [n for n in nodes if provider and (n.get("spec") or {}).get("providerID") == provider]
        for node in mine:
            if not _meta(node).get("deletionTimestamp") and self._delete(f"{NODES}/{node['metadata']['name']}"):
                self._record(now, "node-deleted", node["metadata"]["name"], f"nodeclaim {name} is deleting")
        if mine or (provider and not self._instance_gone(_instance_id(provider), name, now)):
            return
        fresh = self._get(path)
        if fresh is None:
            return
        left = [f for f in _meta(fresh).get("finalizers") or [] if f != FINALIZER]
        if self._patch(
            path, {"metadata": {"finalizers": left, "resourceVersion": fresh["metadata"]["resourceVersion"]}}
        ):
            self._record(now, "nodeclaim-finalized", name)

    def _instance_gone(self, instance_id: str, claim: str, now: datetime) -> bool:
        """``cloudProvider.Delete``: the first call starts the termination; gone after terminate_seconds."""
        began = self._terminating.get(instance_id)
        if began is None:
            self._terminating[instance_id] = began = now
            self._record(now, "instance-terminating", instance_id, f"nodeclaim {claim}")
        return now >= began + timedelta(seconds=self.terminate_seconds)

    def _launch(self, claim: Obj, now: datetime) -> None:
        spec, name = claim.get("spec") or {}, claim["metadata"]["name"]
        req = _requirements(spec)
        if ZONE not in req:  # the EC2NodeClass's subnets: one per zone of the stand-in's region
            req[ZONE] = [z for z in ZONES if z not in _excluded(spec, ZONE)]
        if INSTANCE_TYPE not in req and _excluded(spec, INSTANCE_TYPE):
            req[INSTANCE_TYPE] = [t for t in GPUS if t not in _excluded(spec, INSTANCE_TYPE)]
        itype, zone, capacity = self._offering(req)
        self._launched += 1
        node_name = f"ip-10-0-{200 + self._launched % 50}-{10 + self._launched}.us-west-2.compute.internal"
        instance = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
        pool = (_meta(claim).get("labels") or {}).get(NODEPOOL_LABEL)
        node = gpu_node(
            node_name,
            instance,
            zone=zone,
            instance_type=itype,
            nodepool=pool,
            capacity_type=capacity,
            gpus=GPUS.get(itype, 8),
            gpu_taint=any(t.get("key") == GPU for t in spec.get("taints") or []),
        )
        node["metadata"]["labels"].update(_meta(claim).get("labels") or {})
        node["metadata"]["finalizers"] = [FINALIZER]
        uid = claim["metadata"]["uid"]
        node["metadata"]["ownerReferences"] = [
            {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name, "uid": uid, "blockOwnerDeletion": True}
        ]
        self.sim.create(node)  # the kubelet registers its Node
        self._registered.add(node_name)
        labels = {"node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/zone": zone}
        labels["karpenter.sh/capacity-type"] = capacity
        self._patch(f"{NODECLAIMS}/{name}", {"metadata": {"labels": labels}})
        conditions = [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": rfc3339(now)}
            for t in ("Launched", "Registered", "Initialized", "Ready")
        ]
        status = {
            "providerID": node["spec"]["providerID"],
            "nodeName": node_name,
            "capacity": node["status"]["capacity"],
            "allocatable": node["status"]["allocatable"],
            "conditions": conditions,
        }
        self._patch(f"{NODECLAIMS}/{name}/status", {"status": status})
        self._record(now, "launched", name, f"{node_name} {itype} {zone} {capacity}")

    def _offering(self, req: dict[str, list[str]]) -> tuple[str, str, str]:
        types = req.get("node.kubernetes.io/instance-type") or ["p4d.24xlarge"]
        zones = req.get("topology.kubernetes.io/zone") or ["us-west-2a"]
        capacities = req.get("karpenter.sh/capacity-type") or ["on-demand"]
        for capacity in sorted(capacities, key=lambda c: c != "spot"):  # spot first, as the price order would
            for itype in types:
                for zone in zones:
                    if (itype, zone, capacity) not in self.unavailable:
                        return itype, zone, capacity
        return types[0], zones[0], capacities[0]

    # ------------------------------------------------------------------ node termination

    def _claim_for(self, node: Obj, claims: list[Obj]) -> Obj | None:
        provider = (node.get("spec") or {}).get("providerID")
        found = [c for c in claims if provider and (c.get("status") or {}).get("providerID") == provider]
        return found[0] if len(found) == 1 else None  # duplicates: no single source of truth

    def _finalize_node(self, node: Obj, claims: list[Obj], now: datetime) -> None:
        name = node["metadata"]["name"]
        if NODEPOOL_LABEL not in (_meta(node).get("labels") or {}):
            return  # not managed by Karpenter
        claim = self._claim_for(node, claims)
        claim_name = claim["metadata"]["name"] if claim is not None else ""
        deleting = claim is None or _meta(claim).get("deletionTimestamp")
        if not deleting and self._delete(f"{NODECLAIMS}/{claim_name}"):
            self._record(now, "nodeclaim-deleted", claim_name, f"node {name} is deleting")
        annotations = _meta(claim).get("annotations") or {} if claim else {}
        deadline = parse_rfc3339(annotations[TERMINATION_TIMESTAMP]) if TERMINATION_TIMESTAMP in annotations else None
        if not self._taint(node, now):
            return
        if not self._drain(node, deadline, now):
            self._set_condition(claim, "Drained", "Unknown", "Draining", now)
            return
        if claim is not None and not self._drained_long_enough(claim, now):
            return
        provider = str((node.get("spec") or {}).get("providerID", ""))
        if claim is not None and not self._instance_gone(_instance_id(provider), claim["metadata"]["name"], now):
            self._set_condition(claim, "InstanceTerminating", "True", "InstanceTerminating", now)
            return
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        if self._patch(f"{NODES}/{name}", patch, "application/strategic-merge-patch+json"):
            self._record(now, "node-finalized", name)
            self._collect_orphans(name, now)

    def _taint(self, node: Obj, now: datetime) -> bool:
        spec, meta = node.get("spec") or {}, _meta(node)
        taints = spec.get("taints") or []
        has = any(t.get("key") == DISRUPTED_TAINT["key"] and t.get("effect") == "NoSchedule" for t in taints)
        if has and (meta.get("labels") or {}).get(EXCLUDE_BALANCERS) == "karpenter":
            return True
        new = [t for t in taints if t.get("key") != DISRUPTED_TAINT["key"]] + [dict(DISRUPTED_TAINT)]
        body = {
            "metadata": {"labels": {EXCLUDE_BALANCERS: "karpenter"}, "resourceVersion": meta["resourceVersion"]},
            "spec": {"taints": new},
        }
        if not self._patch(f"{NODES}/{meta['name']}", body):
            return False  # conflict: requeue
        self._record(now, "tainted", meta["name"], "karpenter.sh/disrupted:NoSchedule")
        return True

    def _drain(self, node: Obj, deadline: datetime | None, now: datetime) -> bool:
        """Queue what must leave; True when nothing waits (do-not-disrupt pods do wait)."""
        pods = self._list("/api/v1/pods", f"spec.nodeName={node['metadata']['name']}")
        waiting = [p for p in pods if drainable(p, now)]
        forced = [p for p in waiting if needs_force_delete(p, deadline, now)]
        graceful = [p for p in waiting if p not in forced]
        self._enqueue(forced, deadline, now)

        def tier(pod: Obj) -> int:
            critical = (pod.get("spec") or {}).get("priorityClassName") in CRITICAL
            return 2 * critical + _daemon(pod)

        for level in range(4):
            group = [p for p in graceful if tier(p) == level]
            if group:
                self._enqueue(group, deadline, now)
                break
        return not waiting

    def _enqueue(self, pods: list[Obj], deadline: datetime | None, now: datetime) -> None:
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"])
            item = self._queue.get(key)
            if item is None:
                self._queue[key] = _QueueItem(deadline, now)
            elif deadline is not None and (item.deadline is None or deadline < item.deadline):
                item.deadline = deadline  # a later Add only ever tightens the deadline

    def _drained_long_enough(self, claim: Obj, now: datetime) -> bool:
        cond = next(
            (c for c in (claim.get("status") or {}).get("conditions") or [] if c.get("type") == "Drained"), None
        )
        if cond is None:
            self._set_condition(claim, "Drained", "Unknown", "Draining", now)
            return False
        if cond.get("status") == "True":
            return True
        if now - parse_rfc3339(cond["lastTransitionTime"]) < timedelta(seconds=MIN_DRAIN_SECONDS):
            return False
        self._set_condition(claim, "Drained", "True", "Drained", now)
        self._record(now, "drained", claim["metadata"]["name"])
        return True

    def _set_condition(self, claim: Obj | None, type_: str, status: str, reason: str, now: datetime) -> None:
        if claim is None:
            return
        conditions = list((claim.get("status") or {}).get("conditions") or [])
        old = next((c for c in conditions if c.get("type") == type_), None)
        if old is not None and old.get("status") == status:
            return
        new = {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": rfc3339(now)}
        conditions = [c for c in conditions if c.get("type") != type_] + [new]
        body = {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"conditions": conditions},
        }
        if self._patch(f"{NODECLAIMS}/{claim['metadata']['name']}/status", body):
            claim.setdefault("status", {})["conditions"] = conditions

    def _collect_orphans(self, node: str, now: datetime) -> None:
        """The pod garbage collector: pods bound to a Node that no longer exists are deleted."""
        for pod in self._list("/api/v1/pods", f"spec.nodeName={node}"):
            meta = pod["metadata"]
            options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
            try:
                if self._delete(_pod_path(meta["namespace"], meta["name"]), options):
                    self._record(now, "pod-gc", _key(pod), f"node {node} is gone")
            except ApiError as err:
                if err.code != 409:
                    raise

    # ------------------------------------------------------------------ eviction queue

    def _run_queue(self, now: datetime) -> None:
        for key in sorted(k for k, item in self._queue.items() if item.next_try <= now):
            item = self._queue[key]
            if self._reconcile_pod(key, item, now):
                self._queue.pop(key, None)
            else:
                item.failures += 1
                delay = min(EVICTION_BASE_DELAY * 2 ** (item.failures - 1), EVICTION_MAX_DELAY)
                item.next_try = now + timedelta(seconds=delay)

    def _reconcile_pod(self, key: tuple[str, str, str], item: _QueueItem, now: datetime) -> bool:
        """One queue reconcile; True when the item is complete."""
        ns, name, uid = key
        pod = self._get(_pod_path(ns, name))
        if pod is None or pod["metadata"]["uid"] != uid:
            return True
        if needs_force_delete(pod, item.deadline, now):
            assert item.deadline is not None
            grace = max(int((item.deadline - now).total_seconds()), 1)
            try:
                if self._delete(_pod_path(ns, name), {"gracePeriodSeconds": grace, "preconditions": {"uid": uid}}):
                    self._record(
                        now, "force-deleted", f"{ns}/{name}", f"grace {grace}s, termination at {item.deadline}"
                    )
            except ApiError as err:
                if err.code != 409:
                    raise
            return True
        if not _active(pod):
            return True
        if not evictable(pod, now):
            return False  # do-not-disrupt: stays queued, backing off
        return self._evict(ns, name, uid, now)

    def _evict(self, ns: str, name: str, uid: str, now: datetime) -> bool:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            self._http().call("POST", f"{_pod_path(ns, name)}/eviction", body)
        except ApiError as err:
            if err.code in (404, 409):
                return True
            if err.code == 429 or err.message.endswith(MULTIPLE_PDBS):
                self._record(now, "eviction-blocked", f"{ns}/{name}", err.message)
            return False
        self._record(now, "evicted", f"{ns}/{name}")
        return True

    # ------------------------------------------------------------------ provisioner

    def _provision(self, now: datetime) -> None:
        claims = self._list(NODECLAIMS)
        nodes = self._list(NODES)
        pods = self._list("/api/v1/pods")
        deleting = self._deleting_nodes(claims, nodes)
        for pod in pods:
            if gpu_request(pod) > 0 and self._needs_home(pod, deleting):
                self._batch.setdefault(pod["metadata"]["uid"], pod)
        if not self._batch:
            return
        if self._need_since is None:
            self._need_since = now  # the batch window opens
        if now < self._need_since + timedelta(seconds=self.batch_idle_seconds):
            return
        needs = self._still_needing(pods)
        self._batch.clear()
        self._need_since = None
        homeless = self._pack(needs, self._capacity(claims, nodes, pods, deleting))
        by_node = {n["metadata"]["name"]: n for n in nodes}
        pools = self._list(NODEPOOLS)
        planned: list[tuple[Obj, list[Obj], list[int]]] = []  # (pool, pods, [GPUs left])
        for pod in homeless:
            pool = self._pool_for(pod, by_node, pools)
            if pool is None:
                continue  # no NodePool can take it: stays where it is (Karpenter logs it)
            plan = next((p for p in planned if p[0] is pool and p[2][0] >= gpu_request(pod)), None)
            if plan is None:
                plan = (pool, [], [max(GPUS.get(t, 8) for t in self._pool_types(pool))])
                planned.append(plan)
            plan[1].append(pod)
            plan[2][0] -= gpu_request(pod)
        for pool, members, _ in planned:
            self._create_claim(pool, members, by_node, claims, now)

    def _still_needing(self, pods: list[Obj]) -> list[Obj]:
        """The batch's pods that need capacity now: those still displaced, and those evicted
        meanwhile whose controller recreates them as pending pods (a Job's; the simulator's
        ReplicaSetReplacer already placed a ReplicaSet's or StatefulSet's elsewhere)."""
        live = {p["metadata"]["uid"]: p for p in pods}
        out = []
        for uid, seen in self._batch.items():
            pod = live.get(uid)
            replaced_elsewhere = _owned_by(seen, "apps/v1", "ReplicaSet") or _owned_by(seen, "apps/v1", "StatefulSet")
            if (pod is not None and _active(pod)) or not replaced_elsewhere:
                out.append(pod if pod is not None and _active(pod) else seen)
        return out

    def _pack(self, needs: list[Obj], bins: list[list[Any]]) -> list[Obj]:
        """First-fit decreasing onto existing and in-flight capacity; what does not fit."""
        homeless: list[Obj] = []
        for pod in sorted(needs, key=gpu_request, reverse=True):
            fit = next((b for b in bins if b[1] >= gpu_request(pod) and self._fits(pod, b[0])), None)
            if fit is None:
                homeless.append(pod)
            else:
                fit[1] -= gpu_request(pod)
        return homeless

    @staticmethod
    def _deleting_nodes(claims: list[Obj], nodes: list[Obj]) -> set[str]:
        marked = {(c.get("status") or {}).get("providerID") for c in claims if _meta(c).get("deletionTimestamp")}
        return {
            n["metadata"]["name"]
            for n in nodes
            if _meta(n).get("deletionTimestamp") or (n.get("spec") or {}).get("providerID") in marked
        }

    @staticmethod
    def _needs_home(pod: Obj, deleting: set[str]) -> bool:
        if _daemon(pod) or _mirror(pod):
            return False
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            sts = _owned_by(pod, "apps/v1", "StatefulSet")
            return node in deleting and (_active(pod) or (sts and _terminating(pod)))
        return (pod.get("status") or {}).get("phase") == "Pending" and not _terminating(pod)

    @staticmethod
    def _capacity(claims: list[Obj], nodes: list[Obj], pods: list[Obj], deleting: set[str]) -> list[list[Any]]:
        """[taints-holder, free GPUs] for every schedulable node and every in-flight NodeClaim."""
        used: dict[str, int] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not _terminal(pod):
                used[node] = used.get(node, 0) + gpu_request(pod)
        bins: list[list[Any]] = []
        for node in nodes:
            name = node["metadata"]["name"]
            if name in deleting or (node.get("spec") or {}).get("unschedulable"):
                continue
            gpus = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU) or 0)
            bins.append([node, gpus - used.get(name, 0)])
        for claim in claims:
            if _meta(claim).get("deletionTimestamp") or (claim.get("status") or {}).get("nodeName"):
                continue
            types = _requirements(claim.get("spec") or {}).get("node.kubernetes.io/instance-type") or [""]
            bins.append([claim, max(GPUS.get(t, 8) for t in types)])
        return bins

    @staticmethod
    def _fits(pod: Obj, holder: Obj) -> bool:
        taints = (holder.get("spec") or {}).get("taints") or []
        return all(t.get("effect") == "PreferNoSchedule" or tolerates(pod, t) for t in taints)

    def _pool_for(self, pod: Obj, by_node: dict[str, Obj], pools: list[Obj]) -> Obj | None:
        """The pod's own NodePool (the one of the node it is leaving), else the first it tolerates."""
        old_node = by_node.get(str((pod.get("spec") or {}).get("nodeName")))
        name = (_meta(old_node).get("labels") or {}).get(NODEPOOL_LABEL) if old_node else None
        pool = next((p for p in pools if p["metadata"]["name"] == name), None)
        return pool or next((p for p in pools if self._fits(pod, (p.get("spec") or {}).get("template") or {})), None)

    @staticmethod
    def _pool_types(pool: Obj) -> list[str]:
        template = ((pool.get("spec") or {}).get("template") or {}).get("spec") or {}
        return _requirements(template).get(INSTANCE_TYPE) or [""]

    def _create_claim(
        self, pool: Obj, pods: list[Obj], by_node: dict[str, Obj], claims: list[Obj], now: datetime
    ) -> None:
        template = (pool.get("spec") or {}).get("template") or {}
        tspec = dict(template.get("spec") or {})
        body: Obj = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "generateName": f"{pool['metadata']['name']}-",
                "labels": {
                    **((template.get("metadata") or {}).get("labels") or {}),
                    NODEPOOL_LABEL: pool["metadata"]["name"],
                },
                "annotations": {"karpenter.sh/nodepool-hash-version": "v3"},
                "ownerReferences": [
                    {
                        "apiVersion": "karpenter.sh/v1",
                        "kind": "NodePool",
                        "name": pool["metadata"]["name"],
                        "uid": pool["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": [FINALIZER],
            },
            "spec": {
                **{k: v for k, v in tspec.items() if k in ("nodeClassRef", "requirements", "taints", "startupTaints")},
                **{k: v for k, v in tspec.items() if k in ("expireAfter", "terminationGracePeriod")},
                "resources": {"requests": {GPU: str(sum(gpu_request(p) for p in pods))}},
            },
        }
        made = self._http().call("POST", NODECLAIMS, body)
        name = made["metadata"]["name"]
        for pod in pods:
            old_node = by_node.get(str((pod.get("spec") or {}).get("nodeName")))
            claim = self._claim_for(old_node, claims) if old_node else None
            source = claim["metadata"]["name"] if claim else f"pending {_key(pod)}"
            if name not in self.replacements.setdefault(source, []):
                self.replacements[source].append(name)
        what = ", ".join(f"{_key(p)} ({gpu_request(p)} GPU)" for p in pods)
        self._record(now, "nodeclaim-created", name, f"for {what}")


# --------------------------------------------------------------------------- installs, for doctor scenarios


def karpenter_deployment(
    queue: str | None = "ml-prod", namespace: str = "kube-system", setting: str = "env", version: str = "1.8.0"
) -> Obj:
    """Karpenter's controller Deployment as its Helm chart renders it; ``queue`` is
    ``settings.interruptionQueue``, given as the ``INTERRUPTION_QUEUE`` env var (``setting="env"``,
    v0.32+) or the ``--interruption-queue`` flag (``"flag"``). For the v0.19-v0.31 ConfigMap, create
    :func:`karpenter_global_settings` beside a Deployment made with ``queue=None``."""
    labels = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}
    env = [{"name": "CLUSTER_NAME", "value": "ml-prod"}, {"name": "BATCH_MAX_DURATION", "value": "10s"}]
    args: list[str] = []
    if queue and setting == "env":
        env.append({"name": "INTERRUPTION_QUEUE", "value": queue})
    elif queue:
        args.append(f"--interruption-queue={queue}")
    container: Obj = {"name": "controller", "image": f"public.ecr.aws/karpenter/controller:{version}", "env": env}
    if args:
        container["args"] = args
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "karpenter", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def karpenter_global_settings(queue: str, namespace: str = "kube-system") -> Obj:
    """The v0.19-v0.31 settings ConfigMap naming the interruption queue."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "karpenter-global-settings", "namespace": namespace},
        "data": {"aws.clusterName": "ml-prod", "aws.interruptionQueueName": queue},
    }


def termination_handler(kind: str = "DaemonSet", namespace: str = "kube-system") -> Obj:
    """aws-node-termination-handler as its chart renders it: a DaemonSet (IMDS mode) or a Deployment (queue mode)."""
    labels = {"app.kubernetes.io/name": "aws-node-termination-handler", "app.kubernetes.io/instance": "nth"}
    container = {
        "name": "aws-node-termination-handler",
        "image": "public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.25.1",
        "env": [{"name": "ENABLE_SPOT_INTERRUPTION_DRAINING", "value": "true"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "aws-node-termination-handler", "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
