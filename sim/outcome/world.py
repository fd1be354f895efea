"""The simulated cluster of one arm: nodes and NodeClaims in the simulator, the workloads on them,
EC2 (launches, and instances that die at their deadline), and the ledger of what was lost.

The workloads are the other side of gpuwarden's and Karpenter's actions: a training pod
checkpoints every N minutes (asynchronously: the capture is taken at the interval, complete
`checkpoint_seconds` later), stops and writes a checkpoint when gpuwarden asks (acknowledging
with `gpuwarden.io/checkpoint-done`), and on SIGTERM stops and — if the scenario says so — writes
one before its grace runs out. When a pod is gone, the work since its last completed checkpoint's
capture is lost. Jobs and ReplicaSets recreate their pods; a notebook comes back when its user does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from sim import builders as b
from sim.actors.controllers import schedulable
from sim.outcome.accounting import Ledger
from sim.outcome.engine import Engine, OutcomeSim
from sim.outcome.lives import (
    DO_NOT_DISRUPT,
    NAMESPACES,
    POOL_LABEL,
    POOL_TAINT,
    Obj,
    Pending,
    PodLife,
    Workload,
    pool_taints,
    pool_tolerations,
)
from sim.outcome.reactions import WorkloadSide
from sim.outcome.scenario import Inference, Notebooks, Pool, Scenario, Training


@dataclass
class World(WorkloadSide):
    scenario: Scenario
    engine: Engine
    ledger: Ledger
    #: reactors subscribe here: called with (node name) when a node becomes empty of workload pods
    on_empty: list[Callable[[str], None]] = field(default_factory=list)
    on_idle: list[Callable[[str], None]] = field(default_factory=list)
    lives: dict[str, PodLife] = field(default_factory=dict)
    pending: dict[str, list[Pending]] = field(default_factory=dict)
    node_pods: dict[str, set[str]] = field(default_factory=dict)
    node_pool: dict[str, str] = field(default_factory=dict)
    instance_node: dict[str, str] = field(default_factory=dict)
    restarts: dict[tuple[str, int], int] = field(default_factory=dict)
    #: seconds each pool's nodes have run at the start (`events.node_ages`); a pool not here: new nodes
    ages: dict[str, list[float]] = field(default_factory=dict)
    _seq: int = 0
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def sim(self) -> OutcomeSim:
        return self.engine.sim

    # ------------------------------------------------------------ build

    def build(self) -> None:
        sim = self.sim
        sim.exec_handler = self._on_exec
        sim.on_change(self._on_change)
        for pool in self.scenario.pools:
            itype = self.scenario.instance_type(pool.instance_type)
            capacity = {"spot": ("spot",), "on-demand": ("on-demand",), "reserved": ("reserved",)}
            obj = b.nodepool(pool.name, (itype.name,), capacity[pool.capacity_type], gpu_limit=None)
            obj["spec"]["disruption"] = {
                "consolidationPolicy": pool.consolidation_policy,
                "consolidateAfter": f"{int(pool.consolidate_after_seconds)}s",
                "budgets": pool.budgets if pool.budgets is not None else [{"nodes": pool.budget_nodes}],
            }
            expire = pool.expire_after_hours
            obj["spec"]["template"]["spec"]["expireAfter"] = "Never" if expire is None else f"{expire:g}h"
            obj["spec"]["template"]["spec"]["taints"] = pool_taints(pool.name)
            if pool.termination_grace_seconds is not None:
                obj["spec"]["template"]["spec"]["terminationGracePeriod"] = f"{int(pool.termination_grace_seconds)}s"
            sim.create(obj)
            self.pending[pool.name] = []
            for slot in range(pool.nodes):
                self._node(pool, slot)
        sim.api.ensure_namespace("ml")
        for spec in self.scenario.training:
            for job in range(spec.jobs):
                self._want("training", spec, job)
        for inf in self.scenario.inference:
            sim.create(b.replicaset(f"{inf.name}-rs", "serving", {"app": inf.name}, inf.replicas))
            sim.create(b.pdb(inf.name, "serving", {"app": inf.name}, min_available=inf.min_available))
            for replica in range(inf.replicas):
                self._want("inference", inf, replica)
        for nb in self.scenario.notebooks:
            for i in range(nb.count):
                self._want("notebook", nb, i)
            self._schedule_notebook_day(nb, 0)

    # ------------------------------------------------------------ nodes (EC2; Karpenter launches the others)

    def _next_name(self) -> tuple[str, str]:
        self._seq += 1
        n = self._seq
        return f"ip-10-{n // 250}-{n % 250}-7.{self.scenario.region}.compute.internal", f"i-0{n:016x}"

    def _node(self, pool: Pool, slot: int) -> None:
        """One of the pool's nodes at the start, with its NodeClaim, as Karpenter leaves them. A node
        that has run ``age`` seconds already: the simulator stamps every object's creationTimestamp
        with the run's start, so its NodeClaim's ``expireAfter`` is the pool's less its age (when
        Karpenter expires it, creationTimestamp + expireAfter, is the same)."""
        itype = self.scenario.instance_type(pool.instance_type)
        name, instance = self._next_name()
        zone = f"{self.scenario.region}{'abc'[self._seq % 3]}"
        node = b.gpu_node(
            name,
            instance,
            zone=zone,
            instance_type=itype.name,
            nodepool=pool.name,
            capacity_type=pool.capacity_type,
            gpus=itype.gpus,
        )
        node["spec"]["taints"] = pool_taints(pool.name)
        if pool.capacity_type == "reserved":
            node["metadata"]["labels"] |= {
                "karpenter.k8s.aws/capacity-reservation-id": pool.capacity_reservation_id or "cr-0",
                "karpenter.k8s.aws/capacity-reservation-type": "capacity-block",
            }
        node = self.sim.create(node)
        claim = b.nodeclaim_for(node)
        if pool.expire_after_hours is not None:
            ages = self.ages.get(pool.name) or []
            age = ages[slot] if slot < len(ages) else 0.0
            claim["spec"]["expireAfter"] = f"{max(1, int(pool.expire_after_hours * 3600 - age))}s"
        if pool.termination_grace_seconds is not None:
            claim["spec"]["terminationGracePeriod"] = f"{int(pool.termination_grace_seconds)}s"
        self.sim.create(claim)

    def _node_added(self, node: Obj) -> None:
        """A node joined (at the start, or launched by Karpenter): its device plugin, then what waits."""
        meta = node["metadata"]
        name, labels = meta["name"], meta.get("labels") or {}
        pool = labels.get(POOL_LABEL, "")
        if pool not in self.pending or name in self.node_pool:
            return
        if not any(t.get("key") == POOL_TAINT for t in node["spec"].get("taints") or []):
            # the kubelet registers with the NodePool template's taints (the stand-in sets the GPU one only)
            taints = [*(node["spec"].get("taints") or []), *pool_taints(pool)[1:]]
            self.sim.patch_direct("Node", name, {"spec": {"taints": taints}})
        instance = str(node["spec"]["providerID"]).rsplit("/", 1)[-1]
        self.node_pool[name] = pool
        self.node_pods[name] = set()
        self.instance_node[instance] = name
        gpus = int(node["status"]["capacity"].get(b.GPU, "0"))
        now = self.engine.now()
        self.ledger.node_up(name, gpus, now, replacement=now > 0, pool=pool)
        self.ledger.note(now, name, "node ready")
        self.sim.create(b.daemonset_pod(node))
        self._update_idle(name)
        self.engine.after(0, partial(self._settle_new_node, pool, name))

    def _settle_new_node(self, pool: str, node: str) -> None:
        self.bind_pending(pool)
        if node in self.node_pods and not self.node_pods[node]:
            self._became_empty(node)

    def _node_gone(self, name: str) -> None:
        if name not in self.node_pods:
            return
        self.ledger.node_down(name, self.engine.now())
        self.ledger.note(self.engine.now(), name, "node gone")
        self.node_pods.pop(name, None)

    def can_launch(self, pool: Pool) -> bool:
        """A Capacity Block takes no new instance once its expiration warning is out (40 min before its end)."""
        end = pool.capacity_block_end_hours
        return end is None or self.engine.now() < end * 3600 - 40 * 60

    def release_claim(self, claim_name: str) -> None:
        if self.sim.get("NodeClaim", claim_name) is None:
            return
        self.sim.patch_direct("NodeClaim", claim_name, {"metadata": {"finalizers": None}})
        if self.sim.get("NodeClaim", claim_name) is not None:
            self.sim.delete_direct("NodeClaim", claim_name)

    def terminate_instance(self, node_name: str, why: str) -> None:
        """EC2 takes the instance: every pod on it stops at once, the node and its NodeClaim go
        (as Karpenter's garbage collection of NodeClaims whose instance is gone would)."""
        node = self.sim.get("Node", node_name)
        if node is None:
            return
        workload = [k for k in self.node_pods.get(node_name, set()) if k in self.lives]
        if workload:
            self.ledger.count("nodes_past_deadline")
        self.ledger.note(self.engine.now(), node_name, f"instance terminated ({why})")
        for pod in self.sim.list("Pod", field_selector=f"spec.nodeName={node_name}"):
            meta = pod["metadata"]
            self.sim.delete_direct("Pod", meta["name"], meta["namespace"], grace_seconds=0)
        claim = self.claim_of(node_name)
        self.sim.patch_direct("Node", node_name, {"metadata": {"finalizers": None}})
        if self.sim.get("Node", node_name) is not None:
            self.sim.delete_direct("Node", node_name)
        if claim is not None:
            self.release_claim(claim["metadata"]["name"])
        self._node_gone(node_name)

    def live_nodes(self, pool_name: str) -> list[str]:
        nodes = [n for n, p in self.node_pool.items() if p == pool_name and n in self.node_pods]
        return sorted(nodes, key=lambda n: self.ledger.nodes[n].up_at)

    def workload_order(self, pool_name: str) -> list[str]:
        """The pool's nodes ordered by the workloads they run (empty nodes last): the same job's node
        comes at the same place in every arm, whatever the nodes are called there."""

        def key(node: str) -> tuple[int, list[tuple[str, int]], float]:
            slots = sorted(
                (self.lives[k].spec.name, self.lives[k].slot) for k in self.node_pods[node] if k in self.lives
            )
            return (0 if slots else 1, slots, self.ledger.nodes[node].up_at)

        return sorted(self.live_nodes(pool_name), key=key)

    def claim_of(self, node_name: str) -> Obj | None:
        node = self.sim.get("Node", node_name)
        provider = (node or {}).get("spec", {}).get("providerID")
        claims: list[Obj] = self.sim.api.list_shared(self.sim.rtype("NodeClaim"))  # read only
        return next(
            (
                c
                for c in claims
                if (c.get("status") or {}).get("nodeName") == node_name
                or (provider and (c.get("status") or {}).get("providerID") == provider)
            ),
            None,
        )

    # ------------------------------------------------------------ pods (the workload controllers, the scheduler)

    def _want(self, kind: str, spec: Workload, slot: int) -> None:
        """A pod the workload's controller creates; Pending until the scheduler binds it."""
        n = self.restarts.get((spec.name, slot), 0)
        self.restarts[(spec.name, slot)] = n + 1
        pod = self._pod(kind, spec, f"{spec.name}-{slot:02d}-{n}")
        self.sim.create(pod)
        self.pending[spec.pool].append(Pending(kind, spec, slot, self.engine.now(), pod["metadata"]["name"]))
        self.bind_pending(spec.pool)

    def bind_pending(self, pool_name: str) -> list[Pending]:
        """Bind what fits (the scheduler); returns what is still pending."""
        left: list[Pending] = []
        for want in self.pending.get(pool_name, []):
            node = self._fit(pool_name, want.spec.gpus)
            if node is None:
                left.append(want)
            else:
                self._start(want, node)
        self.pending[pool_name] = left
        return left

    def _free_gpus(self, node: Obj) -> int:
        used = sum(self.lives[k].gpus for k in self.node_pods.get(node["metadata"]["name"], set()) if k in self.lives)
        return int(node["status"]["capacity"].get(b.GPU, "0")) - used

    def _fit(self, pool_name: str, gpus: int) -> Obj | None:
        probe = {"spec": {"tolerations": pool_tolerations(pool_name)}}
        for name in self.live_nodes(pool_name):
            node = self.sim.get("Node", name)
            if node is not None and schedulable(node, probe) and self._free_gpus(node) >= gpus:
                return node
        return None

    def _pod(self, kind: str, spec: Workload, name: str) -> Obj:
        if isinstance(spec, Training):
            pod = b.training_pod(
                name,
                "",
                gpus=spec.gpus,
                checkpoint=spec.checkpoint,
                grace=spec.grace_seconds,
                checkpoint_timeout=spec.checkpoint_timeout_seconds,
                owner=("batch/v1", "Job", name.rsplit("-", 1)[0]),
            )
            if spec.do_not_disrupt:
                pod["metadata"]["annotations"][DO_NOT_DISRUPT] = "true"
        elif isinstance(spec, Inference):
            owner = self.sim.get("ReplicaSet", f"{spec.name}-rs", "serving")
            pod = b.inference_pod(name, "", owner=owner, labels={"app": spec.name}, gpus=spec.gpus)
            pod["spec"]["terminationGracePeriodSeconds"] = spec.grace_seconds
        else:
            resources = {"requests": {b.GPU: str(spec.gpus)}, "limits": {b.GPU: str(spec.gpus)}}
            annotations = {DO_NOT_DISRUPT: "true"} if spec.do_not_disrupt else {}
            pod = b.pod(
                name,
                "",
                "research",
                labels={"app": "jupyterhub", "component": "singleuser-server"},
                annotations=annotations,
                containers=[{"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook", "resources": resources}],
            )
        pod["spec"]["tolerations"] = pool_tolerations(spec.pool)
        pod["spec"]["nodeSelector"] = {POOL_LABEL: spec.pool}
        return pod

    def _start(self, want: Pending, node: Obj) -> None:
        """Bind (the scheduler) and run (the kubelet)."""
        name, spec = want.pod, want.spec
        namespace = NAMESPACES[want.kind]
        pod = self.sim.get("Pod", name, namespace)
        if pod is None:
            return
        key = f"{namespace}/{name}"
        life = PodLife(key, want.kind, spec, want.slot, spec.gpus, node["metadata"]["name"], self.engine.now())
        if isinstance(spec, Training) and spec.nodes_per_job == 1:  # a rank's job begins when every rank runs
            clock = self._clock(life)
            clock.begin(life.started, self.scenario.restart_overhead(spec))
            life.started = clock.trains_from  # it trains (and checkpoints) after its restart overhead
        with self._lock:
            self.lives[key] = life
            self.node_pods.setdefault(life.node, set()).add(key)
        self.ledger.nodes[life.node].used = True
        status = b.running_status(node, name, pod["spec"]["containers"])
        self.sim.patch_direct("Pod", name, {"spec": {"nodeName": life.node}, "status": status}, namespace)
        self._update_idle(life.node)

    # ------------------------------------------------------------ busy and idle

    def _notebook_busy(self, spec: Workload, t: float) -> bool:
        assert isinstance(spec, Notebooks)
        when = self.engine.when(t)
        if spec.weekdays_only and when.weekday() >= 5:
            return False
        return spec.busy_from_hour <= when.hour < spec.busy_to_hour

    def pod_busy(self, life: PodLife, t: float) -> bool:
        if life.sigterm_at is not None:
            return False
        if life.kind == "training":
            return life.stopped_at is None
        if life.kind == "notebook":
            return self._notebook_busy(life.spec, t)
        return True

    def _update_idle(self, node: str) -> None:
        if node not in self.node_pods:
            return
        t = self.engine.now()
        idle = not any(self.pod_busy(self.lives[k], t) for k in self.node_pods[node] if k in self.lives)
        if self.ledger.set_idle(node, idle, t):
            for hook in self.on_idle:
                hook(node)

    def _schedule_notebook_day(self, spec: Notebooks, day: int) -> None:
        if day * 86400 > self.scenario.days * 86400 + 86400:
            return
        self.engine.at(day * 86400 + spec.busy_from_hour * 3600, lambda: self._notebook_shift(spec, True))
        self.engine.at(day * 86400 + spec.busy_to_hour * 3600, lambda: self._notebook_shift(spec, False))
        self.engine.at((day + 1) * 86400, lambda: self._schedule_notebook_day(spec, day + 1))

    def _notebook_shift(self, spec: Notebooks, starting: bool) -> None:
        t = self.engine.now()
        if starting and self._notebook_busy(spec, t):
            present = {life.slot for life in self.lives.values() if life.spec is spec}
            present |= {w.slot for w in self.pending[spec.pool] if w.spec is spec}
            for i in range(spec.count):
                if i not in present:
                    self._want("notebook", spec, i)
        for node in list(self.node_pods):
            self._update_idle(node)
