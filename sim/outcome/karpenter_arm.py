"""Karpenter in the outcome runs: the simulator's Karpenter stand-in (`sim/karpenter.py`: its
interruption, NodeClaim lifecycle, termination, eviction-queue and provisioner controllers, as
their source behaves), stepped on the engine's clock, grown here with what the runs need:

- emptiness consolidation (`WhenEmpty`, and the empty half of `WhenEmptyOrUnderutilized`): a
  node with no workload pod for the NodePool's `consolidateAfter` has its NodeClaim deleted when
  the pool's disruption budgets leave room (`nodes`, percentages rounded up, the most
  restrictive active budget; a budget with a `schedule` is active while its window is open).
  Replacing underutilised nodes is not modelled: every GPU pod of the built-in scenario fills its
  node, so there is nothing to repack;
- Capacity Blocks: Karpenter drains a block's nodes 40 minutes before the block's end (from the
  end date it reads with `ec2:DescribeCapacityReservations`, no message: aws/karpenter-provider-aws
  designs/capacity-blocks.md) and launches nothing more into the block;
- per-instance-type launch times (the stand-in has one `launch_seconds`);
- expiry: a NodeClaim is deleted at its `creationTimestamp + spec.expireAfter`, forcefully, as
  Karpenter v1's expiration controller does (kubernetes-sigs/karpenter,
  pkg/controllers/nodeclaim/expiration/controller.go): no budget and no `do-not-disrupt` holds it,
  and the termination controller drains it with the claim's `terminationGracePeriod`. In every arm
  (expiration is not part of the interruption handling).

Without the interruption queue (arm "nothing") Karpenter still provisions, expires, and terminates
what others delete; it takes no interruption message and does not consolidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sim.actors import karpenter as stand_in
from sim.actors.karpenter import KarpenterAction
from sim.actors.karpenter.cluster import Cluster
from sim.actors.karpenter.lifecycle import LifecycleController
from sim.actors.karpenter.provisioning import Provisioner
from sim.clock import parse_rfc3339
from sim.outcome.events import Incident, IncidentKind
from sim.outcome.payloads import payloads
from sim.outcome.world import World

Obj = dict[str, Any]
#: how the ledger names Karpenter's expiry of a node (`causes.py` reads it)
EXPIRED = "expired: creationTimestamp + expireAfter"
#: a watch event reaches the controllers' work queues this long after the write (controller-runtime
#: batches them; ASSUMPTION): every write of one drain round is one reconcile, not one each
_WATCH_DELAY = 1.0


@dataclass
class _ClosedPoolLifecycle(LifecycleController):
    """Each pool's own launch time; nothing launches into a pool whose capacity is gone."""

    launch_by_pool: dict[str, float] = field(default_factory=dict)
    closed_pools: set[str] = field(default_factory=set)

    def launch_seconds_for(self, claim: Obj) -> float:
        pool = (claim["metadata"].get("labels") or {}).get(stand_in.NODEPOOL_LABEL, "")
        return self.launch_by_pool.get(pool, super().launch_seconds_for(claim))

    def reconcile(self, claim: Obj, nodes: list[Obj], now: datetime) -> None:
        pool = (claim["metadata"].get("labels") or {}).get(stand_in.NODEPOOL_LABEL, "")
        if pool in self.closed_pools and not (claim.get("status") or {}).get("providerID"):
            return  # nothing to launch into (an insufficient-capacity error, retried in vain)
        super().reconcile(claim, nodes, now)


@dataclass
class _ClosedPoolProvisioner(Provisioner):
    closed_pools: set[str] = field(default_factory=set)

    def _create_claim(
        self, pool: Obj, pods: list[Obj], by_node: dict[str, Obj], claims: list[Obj], now: datetime
    ) -> None:
        if pool["metadata"]["name"] not in self.closed_pools:
            super()._create_claim(pool, pods, by_node, claims, now)


@dataclass
class ScenarioKarpenter(stand_in.Karpenter):
    launch_by_pool: dict[str, float] = field(default_factory=dict)
    #: pools whose capacity is gone (an ending Capacity Block)
    closed_pools: set[str] = field(default_factory=set)

    def make_lifecycle(self, cluster: Cluster) -> LifecycleController:
        return _ClosedPoolLifecycle(cluster, launch_by_pool=self.launch_by_pool, closed_pools=self.closed_pools)

    def make_provisioner(self, cluster: Cluster) -> Provisioner:
        return _ClosedPoolProvisioner(cluster, closed_pools=self.closed_pools)


class KarpenterDriver:
    """Steps the stand-in whenever something it watches changes, and at its own due times."""

    def __init__(self, world: World, interruption_queue: bool, consolidation: bool) -> None:
        self.world = world
        scenario = world.scenario
        stand_in.GPUS.update({t.name: t.gpus for t in scenario.instance_types})
        self.k = ScenarioKarpenter(
            world.sim,
            interruption_queue=interruption_queue,
            launch_by_pool={p.name: scenario.instance_type(p.instance_type).launch_seconds for p in scenario.pools},
            on_action=self._action,
        )
        self.k.cluster.direct_reads = True  # the stand-in is the simulator's own actor (docs/simulate.md)
        self.interruption_queue = interruption_queue
        self.consolidation = consolidation
        self._wake_at: float | None = None
        self._empty_since: dict[str, float] = {}
        #: pool -> empty nodes its budgets refused: looked at again when the pool's nodes change
        self._refused: dict[str, set[str]] = {}
        self._expiring: set[str] = set()
        world.sim.on_change(self._changed)
        if consolidation:
            world.on_empty.append(self._node_empty)

    # ------------------------------------------------------------ stepping

    def _changed(self, kind: str, event: str, obj: Obj) -> None:
        if kind == "NodeClaim" and event == "ADDED":
            self._plan_expiry(obj)
        if kind in ("Pod", "Node", "NodeClaim", "NodePool"):
            self.wake(self.world.engine.now() + _WATCH_DELAY)
        if kind in ("Node", "NodeClaim") and event in ("ADDED", "DELETED"):
            pool = (obj["metadata"].get("labels") or {}).get(stand_in.NODEPOOL_LABEL, "")
            if self._refused.get(pool):  # the budget's count of nodes (or of those disrupting) moved
                self.world.engine.after(0, partial(self._retry_refused, pool))

    def wake(self, t: float) -> None:
        if self._wake_at is not None and self._wake_at <= t:
            return
        self._wake_at = t
        self.world.engine.at(t, partial(self._step, t))

    def _step(self, t: float) -> None:
        if self._wake_at != t:
            return  # superseded by an earlier wake, which looked again after it ran
        self._wake_at = None
        self.k.settle()
        due = self._next_due()
        if due is not None:
            self.wake(due)

    def _next_due(self) -> float | None:
        engine = self.world.engine
        times = self.k.due_times()
        deleting = False
        for claim in self.world.sim.api.list_shared(self.world.sim.rtype("NodeClaim")):  # read only
            meta = claim["metadata"]
            if meta.get("deletionTimestamp"):
                deleting = True
            elif not (claim.get("status") or {}).get("providerID"):
                pool = (meta.get("labels") or {}).get(stand_in.NODEPOOL_LABEL, "")
                if pool not in self.k.closed_pools:
                    launch = self.k.launch_by_pool.get(pool, self.k.launch_seconds)
                    times.append(parse_rfc3339(meta["creationTimestamp"]) + _seconds(launch))
        if deleting:  # what a drain does at a time of its own, not on a write (which wakes us anyway)
            times += self.k.drain_times()
        now = engine.now()
        # what is due now was done by the settle just before (the stand-in keeps finished terminations)
        due = [s for s in ((t - engine.start).total_seconds() for t in times) if s > now]
        return min(due) if due else None

    def _action(self, action: KarpenterAction) -> None:
        world = self.world
        if action.type == "eviction-blocked":
            world.ledger.count("evictions_blocked")
        life = world.lives.get(action.target)
        node = life.node if life is not None else action.target
        world.ledger.note(world.engine.now(), node, f"Karpenter {action.type} {action.target}")

    # ------------------------------------------------------------ interruption

    def on_incident(self, incident: Incident, nodes: list[str]) -> None:
        if incident.kind is IncidentKind.CAPACITY_BLOCK_END:
            if self.interruption_queue:  # the capacity-block handling ships with the same controller set
                self.world.engine.after(0, partial(self._block_ends, incident.pool, nodes))
            return
        delay = self.world.scenario.reactions.karpenter_seconds
        for event in payloads(self.world, incident, nodes):
            self.world.engine.after(delay, partial(self._deliver, event))

    def _deliver(self, event: Obj) -> None:
        self.k.deliver_event(event)
        self.wake(self.world.engine.now())

    def _block_ends(self, pool: str, nodes: list[str]) -> None:
        self.k.closed_pools.add(pool)
        for node in nodes:
            self._delete_claim(node, "capacity block ending")

    def close_pool(self, pool: str) -> None:
        self.k.closed_pools.add(pool)

    def _delete_claim(self, node: str, why: str) -> None:
        claim = self.world.claim_of(node)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        self.world.ledger.note(self.world.engine.now(), node, f"Karpenter deletes NodeClaim ({why})")
        self.world.sim.delete_direct("NodeClaim", claim["metadata"]["name"])
        self.wake(self.world.engine.now())

    # ------------------------------------------------------------ expiry

    def _plan_expiry(self, claim: Obj) -> None:
        from gpuwarden.domain.nodepools import NEVER, parse_go_duration  # Go's ParseDuration, as Karpenter reads it

        meta = claim["metadata"]
        after = (claim.get("spec") or {}).get("expireAfter")
        if not after or after == NEVER or meta["uid"] in self._expiring:
            return
        self._expiring.add(meta["uid"])
        engine = self.world.engine
        at = parse_rfc3339(meta["creationTimestamp"]) + parse_go_duration(str(after))
        when = max(engine.now(), (at - engine.start).total_seconds())
        engine.at(when, partial(self._expire, meta["name"], meta["uid"]))

    def _expire(self, name: str, uid: str) -> None:
        claim = self.world.sim.get("NodeClaim", name)
        if claim is None or claim["metadata"]["uid"] != uid or claim["metadata"].get("deletionTimestamp"):
            return  # gone before it expired (consolidated, replaced, deleted by gpuwarden)
        node = (claim.get("status") or {}).get("nodeName") or name
        self.world.ledger.count("expired_by_karpenter")
        self.world.ledger.note(self.world.engine.now(), node, f"Karpenter deletes NodeClaim ({EXPIRED})")
        self.world.sim.delete_direct("NodeClaim", name)
        self.wake(self.world.engine.now())

    # ------------------------------------------------------------ consolidation (emptiness)

    def _node_empty(self, node: str) -> None:
        now = self.world.engine.now()
        self._empty_since[node] = now
        pool = self.world.scenario.pool(self.world.node_pool[node])
        self.world.engine.after(pool.consolidate_after_seconds, partial(self._consolidate, node, now))

    def _consolidate(self, node: str, since: float, polled: bool = False) -> None:
        """Remove the empty node if its pool's budgets allow. Refused, it is looked at again when a
        node or NodeClaim of its pool comes or goes (what the budgets count: nodes, and those
        disrupting, such as an expired node a do-not-disrupt pod holds, which counts until it is gone:
        `BuildDisruptionBudgetMapping`, pkg/controllers/disruption/helpers.go), and once a minute only
        while a scheduled budget may open (events, not a poll for the rest of the week)."""
        world = self.world
        pool_name = world.node_pool.get(node, "")
        refused = self._refused.setdefault(pool_name, set())
        claim = world.claim_of(node)
        used = world.node_pods.get(node) or node not in world.node_pods
        if self._empty_since.get(node) != since or used or claim is None or claim["metadata"].get("deletionTimestamp"):
            refused.discard(node)
            return  # gone, used again since, or already going
        if not self._budget_allows(pool_name):
            first = node not in refused
            refused.add(node)
            if (first or polled) and self._schedule_may_open(pool_name):
                world.engine.after(60, partial(self._consolidate, node, since, True))
            return
        refused.discard(node)
        world.ledger.count("consolidated")
        self._delete_claim(node, "consolidation: empty")

    def _retry_refused(self, pool_name: str) -> None:
        for node in sorted(self._refused.get(pool_name, set())):
            if node in self._empty_since:
                self._consolidate(node, self._empty_since[node])

    def _schedule_may_open(self, pool_name: str) -> bool:
        """A budget with a schedule applies to emptiness, and no budget without one forbids it always."""
        nodepool = self.world.sim.get("NodePool", pool_name) or {}
        budgets = ((nodepool.get("spec") or {}).get("disruption") or {}).get("budgets") or []
        empty = [b for b in budgets if "Empty" in b.get("reasons", ["Empty"])]
        never = any(not b.get("schedule") and str(b.get("nodes")) in ("0", "0%") for b in empty)
        return not never and any(b.get("schedule") for b in empty)

    def _budget_allows(self, pool_name: str) -> bool:
        world = self.world
        nodepool = world.sim.get("NodePool", pool_name) or {}
        budgets = ((nodepool.get("spec") or {}).get("disruption") or {}).get("budgets") or [{"nodes": "10%"}]
        total = len(world.live_nodes(pool_name))
        # emptiness consolidation's reason is Empty: a budget naming other reasons does not apply
        active = [b for b in budgets if _active(b, world.sim.clock.now()) and "Empty" in b.get("reasons", ["Empty"])]
        allowed = min((_allowed(b.get("nodes", "10%"), total) for b in active), default=_allowed("10%", total))
        claims = world.sim.list("NodeClaim", label_selector=f"{stand_in.NODEPOOL_LABEL}={pool_name}")
        disrupting = sum(1 for c in claims if c["metadata"].get("deletionTimestamp"))
        return disrupting < allowed


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def _allowed(value: Any, total: int) -> int:
    text = str(value)
    if text.endswith("%"):
        return math.ceil(total * float(text[:-1]) / 100.0)
    return int(text)


def _active(budget: Obj, now: datetime) -> bool:
    """A budget without a schedule is always active; one with a schedule, while its window is open."""
    schedule, duration = budget.get("schedule"), budget.get("duration")
    if not schedule or not duration:
        return True
    from gpuwarden.domain.windows.model import Window  # the project's one cron evaluation

    doc = {"name": "budget", "schedule": schedule, "timezone": "UTC", "duration": duration, "max_disruptions": 0}
    try:
        return Window.model_validate(doc).occurrence_at(now) is not None
    except ValueError:
        return True  # a budget the model cannot read counts (the most restrictive reading)
