"""Karpenter in the outcome runs: its provisioner (every arm), its interruption controller and
terminator, and its emptiness consolidation (arms "karpenter" and "gpuwarden").

As Karpenter v1's source behaves (read from kubernetes-sigs/karpenter and
aws/karpenter-provider-aws):
- interruption: Spot interruption and scheduled-change (AWS Health) messages delete the
  node's NodeClaim; a rebalance recommendation only publishes an Event; a Capacity Block's
  nodes are drained 40 minutes before the block's end;
- termination: the NodeClaim's finalizer holds it while the node is tainted
  `karpenter.sh/disrupted:NoSchedule` and drained through the Eviction API (PDBs obeyed, a
  429 is retried on the next requeue); DaemonSet, mirror and `karpenter.sh/do-not-disrupt`
  pods are passed over until the NodePool's `terminationGracePeriod` (if set) runs out, when
  they are deleted so that their own grace ends with it; the instance is terminated once no
  drainable pod is left;
- provisioning: pending pods are batched (`BATCH_MAX_DURATION`) and NodeClaims launched for
  what in-flight NodeClaims do not already cover;
- consolidation: a node with no workload pods for `consolidateAfter` is deleted, when the
  pool's disruption budget (`nodes`, percentages rounded up) leaves room. Underutilised-node
  replacement is not modelled: every GPU pod of the built-in scenario fills its node.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from sim import errors
from sim.clock import parse_rfc3339
from sim.outcome.events import Incident, IncidentKind
from sim.outcome.world import DO_NOT_DISRUPT, World

DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
Obj = dict[str, Any]


class Provisioner:
    def __init__(self, world: World) -> None:
        self.world = world
        self._batching: set[str] = set()
        world.provision_hooks.append(self.request)

    def request(self, pool_name: str) -> None:
        if pool_name in self._batching or not self.world.pending.get(pool_name):
            return
        self._batching.add(pool_name)
        batch = self.world.scenario.reactions.provisioner_batch_seconds
        self.world.engine.after(batch, lambda: self._launch(pool_name))

    def _launch(self, pool_name: str) -> None:
        self._batching.discard(pool_name)
        world = self.world
        left = world.bind_pending(pool_name)
        if not left:
            return
        pool = world.scenario.pool(pool_name)
        if not world.can_launch(pool):
            return  # the Capacity Block is ending: no capacity to launch into
        gpus = world.scenario.instance_type(pool.instance_type).gpus
        per_node = max(1, gpus // left[0].spec.gpus)
        needed = math.ceil(len(left) / per_node) - world.in_flight_gpus(pool_name) // gpus
        for _ in range(max(0, needed)):
            world.launch(pool_name, "pending pods")


class Karpenter:
    def __init__(self, world: World, consolidation: bool = True) -> None:
        self.world = world
        self.consolidation = consolidation
        self._terminating: set[str] = set()
        self._empty_since: dict[str, float] = {}
        world.sim.on_change(self._on_change)
        if consolidation:
            world.on_empty.append(self._node_empty)

    # ------------------------------------------------------------ interruption controller

    def on_incident(self, incident: Incident, nodes: list[str]) -> None:
        if incident.kind is IncidentKind.REBALANCE:
            return  # RebalanceRecommendation: an Event only
        delay = self.world.scenario.reactions.karpenter_seconds
        if incident.kind is IncidentKind.CAPACITY_BLOCK_END:
            # Karpenter's capacity-block support drains a block's nodes 40 minutes before its end date,
            # from the reservation's end date it already knows (designs/capacity-blocks.md), no message
            delay = 0.0
        for node in nodes:
            self.world.engine.after(delay, partial(self._delete_claim, node, "interruption"))

    def _delete_claim(self, node: str, why: str) -> None:
        claim = self.world.claim_of(node)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        self.world.ledger.note(self.world.engine.now(), node, f"Karpenter deletes NodeClaim ({why})")
        self.world.sim.delete_direct("NodeClaim", claim["metadata"]["name"])

    # ------------------------------------------------------------ terminator

    def _on_change(self, kind: str, event: str, obj: Obj) -> None:
        if kind != "NodeClaim" or event != "MODIFIED" or not obj["metadata"].get("deletionTimestamp"):
            return
        name = obj["metadata"]["name"]
        if name in self._terminating:
            return
        self._terminating.add(name)
        self.world.engine.after(0, lambda: self._terminate(name))

    def _terminate(self, claim_name: str) -> None:
        world = self.world
        claim = world.sim.get("NodeClaim", claim_name)
        if claim is None:
            self._terminating.discard(claim_name)
            return
        node_name = (claim.get("status") or {}).get("nodeName")
        node = world.sim.get("Node", node_name) if node_name else None
        if node is None:
            world.release_claim(claim_name)
            self._terminating.discard(claim_name)
            return
        self._taint(node)
        if self._drain(node, claim):
            world.terminate_instance(node["metadata"]["name"], "karpenter")
            self._terminating.discard(claim_name)
            return
        world.engine.after(world.scenario.reactions.terminator_requeue_seconds, lambda: self._terminate(claim_name))

    def _taint(self, node: Obj) -> None:
        taints = node["spec"].get("taints") or []
        if any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
            return
        self.world.sim.patch_direct("Node", node["metadata"]["name"], {"spec": {"taints": [*taints, DISRUPTED_TAINT]}})

    def _drain(self, node: Obj, claim: Obj) -> bool:
        """One pass; True when no drainable pod is left on the node."""
        world = self.world
        expiry = self._grace_expiry(node, claim)
        left = 0
        for pod in world.sim.list("Pod", field_selector=f"spec.nodeName={node['metadata']['name']}"):
            if _daemon_or_mirror(pod):
                continue
            left += 1
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            protected = (meta.get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"
            if protected:
                grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
                if expiry is not None and world.engine.now() >= expiry - grace:
                    world.sim.delete_direct("Pod", meta["name"], meta["namespace"])
                continue
            try:
                world.sim.api.evict(meta["namespace"], meta["name"], {})
            except errors.ApiError as err:
                if err.code != 429:
                    raise
                world.ledger.count("evictions_blocked")
        return left == 0

    def _grace_expiry(self, node: Obj, claim: Obj) -> float | None:
        pool = self.world.scenario.pool(node["metadata"]["labels"]["karpenter.sh/nodepool"])
        if pool.termination_grace_seconds is None:
            return None
        deleted = parse_rfc3339(claim["metadata"]["deletionTimestamp"])
        return (deleted - self.world.engine.start).total_seconds() + pool.termination_grace_seconds

    # ------------------------------------------------------------ consolidation (emptiness)

    def _node_empty(self, node: str) -> None:
        now = self.world.engine.now()
        self._empty_since[node] = now
        pool = self.world.scenario.pool(self.world.node_pool[node])
        self.world.engine.after(pool.consolidate_after_seconds, lambda: self._consolidate(node, now))

    def _consolidate(self, node: str, since: float) -> None:
        world = self.world
        if self._empty_since.get(node) != since or world.node_pods.get(node) or node not in world.node_pods:
            return  # gone, or used again since
        pool_name = world.node_pool[node]
        if not self._budget_allows(pool_name):
            world.engine.after(60, lambda: self._consolidate(node, since))
            return
        world.ledger.count("consolidated")
        self._delete_claim(node, "consolidation: empty")

    def _budget_allows(self, pool_name: str) -> bool:
        world = self.world
        nodepool = world.sim.get("NodePool", pool_name)
        budgets = ((nodepool or {}).get("spec") or {}).get("disruption", {}).get("budgets") or [{"nodes": "10%"}]
        nodes = world.live_nodes(pool_name)
        allowed = min(_allowed(b.get("nodes", "10%"), len(nodes)) for b in budgets if not b.get("schedule"))
        disrupting = sum(
            1
            for c in world.sim.list("NodeClaim", label_selector=f"karpenter.sh/nodepool={pool_name}")
            if c["metadata"].get("deletionTimestamp")
        )
        return disrupting < allowed


def _allowed(value: str, total: int) -> int:
    text = str(value)
    if text.endswith("%"):
        return math.ceil(total * float(text[:-1]) / 100.0)
    return int(text)


def _daemon_or_mirror(pod: Obj) -> bool:
    meta = pod["metadata"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return True
    return any(r.get("kind") == "DaemonSet" for r in meta.get("ownerReferences") or [])
