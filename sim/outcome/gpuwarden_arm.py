"""gpuwarden in the outcome runs: each EC2 / AWS Health / CloudWatch event as its EventBridge
payload, routed by the CLI's router (`gpuwarden invoke`'s `run_event`) into the real services,
with the real adapters and Kubernetes client over HTTP to the simulator. One actor thread per
invocation, as concurrent Lambda invocations; the drain runs in the invocation to its end
(as `gpuwarden invoke` runs it). Maintenance plans go through a Scheduler stand-in that invokes
the planned tick at its time, through the same router.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from gpuwarden.domain.policy import section_of
from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from sim.clock import rfc3339
from sim.outcome.events import Incident
from sim.outcome.payloads import EVENTS, instance_of, payloads
from sim.outcome.world import World
from sim.wiring import sim_deps

_CHECKPOINT_TIMED_OUT = "checkpoint timed out"
#: the periodic reconcile's tick (deployed: `rate(5 minutes)`, infra/components/schedules.py); here
#: hourly, which is enough for what it plans in a run (a Karpenter expiry is known days ahead) and
#: keeps a week's run short
RECONCILE_SECONDS = 3600.0


class SimScheduler:
    """EventBridge Scheduler's one-time schedules, on the engine's clock (idempotent by name)."""

    def __init__(self, reactor: Gpuwarden) -> None:
        self.reactor = reactor
        self.names: set[str] = set()

    def schedule_once(self, name: str, at: datetime, payload: Mapping[str, Any]) -> str:
        if name not in self.names:
            self.names.add(name)
            tick = dict(payload)
            engine = self.reactor.world.engine
            when = max((at - engine.start).total_seconds(), engine.now())

            def fire() -> None:
                tick.update(scheduled_time=rfc3339(at), execution_id=name, attempt="1")
                self.reactor.invoke(tick, f"schedule {name}")

            engine.at(when, fire)
        return f"arn:aws:scheduler:us-west-2:123456789012:schedule/default/{name}"


class Gpuwarden:
    def __init__(self, world: World, policy: Any) -> None:
        from gpuwarden.adapters.ledger import MemoryLedger

        self.world = world
        self.deps = sim_deps(world.sim, caller="simulate", policy=policy, ledger=MemoryLedger(), throttle=False)
        self.deps.sleep = world.engine.sleep
        self.deps.side_by_side = world.engine.side_by_side
        self.deps.scheduler = SimScheduler(self)
        self.results: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._idle_alarmed: dict[str, float] = {}
        world.on_idle.append(self._node_idle)

    # ------------------------------------------------------------ events

    def start(self, days: float) -> None:
        """EC2's `Capacity Block Delivered` for each block the cluster runs in (at the run's start), so
        gpuwarden can plan the block's drain `capacity_blocks.lead_minutes` before EC2 reclaims it;
        and the periodic reconcile (every `RECONCILE_SECONDS` from the start), which plans each
        Karpenter node's expiry (kind karpenter-expiry, docs/cluster.md#expiry)."""
        scenario = self.world.scenario
        ticks = int(days * 86400.0 // RECONCILE_SECONDS)
        for n in range(ticks + 1):
            self.world.engine.at(n * RECONCILE_SECONDS, partial(self._reconcile, n * RECONCILE_SECONDS))
        for pool in scenario.pools:
            if pool.capacity_block_end_hours is None or pool.capacity_reservation_id is None:
                continue
            end = self.world.engine.when(pool.capacity_block_end_hours * 3600)
            arn = f"arn:aws:ec2:{scenario.region}:123456789012:capacity-reservation/{pool.capacity_reservation_id}"
            event = {
                "version": "0",
                "id": f"{pool.capacity_reservation_id}-delivered",
                "detail-type": "Capacity Block Delivered",
                "source": "aws.ec2",
                "account": "123456789012",
                "time": rfc3339(self.world.engine.when(0)),
                "region": scenario.region,
                "resources": [arn],
                "detail": {"capacity-reservation-id": pool.capacity_reservation_id, "end-date": rfc3339(end)},
            }
            self.world.engine.at(0, partial(self.invoke, event, f"{pool.name} delivered"))

    def _reconcile(self, t: float) -> None:
        at = rfc3339(self.world.engine.when(t))
        tick = {"gpuwarden": "budget-window", "action": "reconcile", "scheduled_time": at}
        self.invoke(tick | {"execution_id": f"reconcile-{int(t)}", "attempt": "1"}, f"reconcile {at}")

    def on_incident(self, incident: Incident, nodes: list[str]) -> None:
        delay = self.world.scenario.reactions.gpuwarden_seconds
        for payload in payloads(self.world, incident, nodes):
            self.world.engine.after(delay, partial(self.invoke, payload, incident.id))

    def invoke(self, payload: dict[str, Any], label: str) -> None:
        """One invocation, in its own actor: the CLI's router, the real services, to the end."""
        self.world.ledger.count("gpuwarden_invocations")

        def body() -> None:
            from gpuwarden.domain.errors import GpuwardenError
            from gpuwarden.local import run_event

            try:
                result = run_event(payload, self.deps)
            except GpuwardenError as err:  # InvalidEvent included: what this version does not parse
                self.failures.append(f"{label}: {type(err).__name__}: {err}")
                return
            self._count(result)

        self.world.engine.spawn(label, body)

    def _count(self, result: dict[str, Any]) -> None:
        self.results.append(result)
        ledger = self.world.ledger
        now = self.world.engine.now()
        for action in result.get("actions") or []:
            kind = action.get("type")
            if kind == "checkpoint-requested":
                ledger.count("checkpoints_requested")
            elif kind == "eviction-blocked":
                ledger.count("evictions_blocked")
            elif kind == "evict" and action.get("reason") == _CHECKPOINT_TIMED_OUT:
                ledger.count("checkpoints_timed_out")
        node = result.get("node") or ""
        ledger.note(now, node, f"gpuwarden {result.get('kind')}: {result.get('outcome')} - {result.get('reason')}")

    # ------------------------------------------------------------ gpu-idle: the CloudWatch alarm

    def _node_idle(self, node: str) -> None:
        since = self.world.engine.now()
        self._idle_alarmed[node] = since
        minutes = section_of(self.deps.policy, GpuIdlePolicy).evaluation_minutes
        self.world.engine.after(minutes * 60, lambda: self._alarm(node, since))

    def _alarm(self, node: str, since: float) -> None:
        book = self.world.ledger.nodes.get(node)
        if book is None or book.down_at is not None or book.idle_since != since:
            return  # busy again or gone: the contributor never reached ALARM
        instance = instance_of(self.world, node)
        self._put_idle_metrics(instance, node)
        event = json.loads((EVENTS / "cloudwatch-alarm-contributor-state-change.json").read_text())
        event["id"] = f"gpu-idle-{instance}-{int(since)}"
        event["time"] = rfc3339(self.world.sim.clock.now())
        event["detail"]["alarmContributor"]["attributes"] = {"InstanceId": instance, "NodeName": node}
        self.invoke(event, f"gpu-idle {node}")

    def _put_idle_metrics(self, instance: str, node: str) -> None:
        """What Container Insights would have published for this node: 0 % for the whole evaluation."""
        import boto3

        policy = self.deps.policy
        now = datetime.now(UTC)  # the adapter asks CloudWatch for the last minutes of the real clock
        dims = [
            {"Name": "ClusterName", "Value": policy.cluster},
            {"Name": "InstanceId", "Value": instance},
            {"Name": "NodeName", "Value": node},
        ]
        idle = section_of(policy, GpuIdlePolicy)
        step = idle.period_seconds
        data = [
            {
                "MetricName": "node_gpu_utilization",
                "Dimensions": dims,
                "Timestamp": now - timedelta(seconds=s),
                "Value": 0.0,
            }
            for s in range(step // 2, idle.evaluation_minutes * 60, step)
        ]
        client = boto3.client("cloudwatch", region_name=self.world.scenario.region)
        client.put_metric_data(Namespace="ContainerInsights", MetricData=data)
