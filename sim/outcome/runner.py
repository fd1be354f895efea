"""One run: the same incidents through three arms, each on its own simulated cluster.

- `nothing`: no interruption handling and no consolidation; Karpenter's provisioner still
  replaces lost capacity for pending pods. An interrupted instance dies at its deadline.
- `karpenter`: Karpenter's interruption queue, terminator and emptiness consolidation.
- `gpuwarden`: the same Karpenter, plus gpuwarden's real handlers for every event.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any

from sim.outcome.accounting import Ledger
from sim.outcome.causes import attribute, by_cause, lost_to_expiry
from sim.outcome.costs import arm_costs, net_per_week, verdict
from sim.outcome.engine import Engine
from sim.outcome.events import Incident, IncidentKind, generate, node_ages
from sim.outcome.gangs import GangWorld
from sim.outcome.multinode import multinode_json
from sim.outcome.prices import PriceTable
from sim.outcome.scenario import Scenario
from sim.outcome.world import World

Progress = Callable[[str, float, int], None]  # (which run and arm, fraction done, incidents so far)


class Arm(StrEnum):
    NOTHING = "nothing"
    KARPENTER = "karpenter"
    GPUWARDEN = "gpuwarden"
    #: the same week with no incident at all, Karpenter as in `karpenter`: what goodput can be
    #: (docs/simulate.md#goodput)
    BASELINE = "no-incidents"


ARMS = (Arm.NOTHING, Arm.KARPENTER, Arm.GPUWARDEN, Arm.BASELINE)


@dataclass
class ArmResult:
    arm: Arm
    figures: dict[str, Any]
    ledger: Ledger
    seconds: float
    engine_steps: int
    failures: list[str] = field(default_factory=list)
    incidents: dict[str, list[str]] = field(default_factory=dict)  # incident id -> nodes it hit
    #: gpuwarden's JSON results and its ledger (arm "gpuwarden")
    gpuwarden_results: list[dict[str, Any]] = field(default_factory=list)
    gpuwarden_ledger: Any = None


@dataclass
class Outcome:
    scenario: Scenario
    seed: int
    days: float
    incidents: list[Incident]
    arms: list[ArmResult]
    #: what the dollars are computed with (docs/simulate.md#prices); None: no dollars
    prices: PriceTable | None = None

    def costs(self) -> dict[str, dict[str, float]]:
        """USD per arm (`sim/outcome/costs.py`); empty without a price table."""
        if self.prices is None:
            return {}
        return {r.arm.value: arm_costs(r, self.scenario, self.prices) for r in self.arms}

    def verdict(self, ahead: str = "") -> str:
        """The last line (docs/simulate.md#the-table): goodput first, then dollars; `ahead`: what the
        headline over seeds adds (in how many weeks gpuwarden is ahead)."""
        if self.prices is None:
            return ""
        goodput = {r.arm.value: float(r.figures["ettr"]) for r in self.arms}
        return verdict(self.costs(), self.days, self.prices, goodput, ahead)

    def to_json(self) -> dict[str, Any]:
        """The document `simulate --json` prints. Everything but `timing` depends on the scenario, the
        seed, the days, the policy and the prices only: the same inputs give the same document."""
        costs = self.costs()
        doc: dict[str, Any] = {
            "scenario": self.scenario.name,
            "seed": self.seed,
            "days": self.days,
            "setup": self.scenario.setup(),
            "incidents": {k.value: sum(1 for i in self.incidents if i.kind is k) for k in IncidentKind},
            "arms": {
                r.arm.value: {
                    **r.figures,
                    "training_lost_by_cause": by_cause(attribute(r)),
                    "training_lost_to_expiry": lost_to_expiry(r),
                    **({"cost_usd": costs[r.arm.value]} if costs else {}),
                    "losses": [a.to_json() for a in attribute(r)],
                    "gpuwarden_failures": r.failures,
                }
                for r in self.arms
            },
            "multi_node_jobs": multinode_json(self),
        }
        if self.prices is not None and costs:
            doc["prices"] = self.prices.model_dump(mode="json")
            doc["net_per_week_usd"] = {
                f"{arm}_vs_{against}": net_per_week(costs, self.days, against, arm)
                for arm, against in (("gpuwarden", "karpenter"), ("nothing", "karpenter"), ("gpuwarden", "nothing"))
                if arm in costs and against in costs
            }
            doc["verdict"] = self.verdict()
        doc["timing"] = {
            r.arm.value: {"real_seconds": round(r.seconds, 1), "engine_steps": r.engine_steps} for r in self.arms
        }
        return doc


@contextmanager
def _quiet_gpuwarden() -> Iterator[None]:
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    from gpuwarden.observability import logger

    level = logger.log_level
    logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)


def _aws(arm: Arm) -> Any:
    if arm is not Arm.GPUWARDEN:
        return nullcontext()
    from sim.scenes.base import simulated_aws

    return simulated_aws()


def run_arm(
    scenario: Scenario,
    arm: Arm,
    incidents: list[Incident],
    days: float,
    policy: Any = None,
    progress: Progress | None = None,
    label: str = "",
    ages: dict[str, list[float]] | None = None,
) -> ArmResult:
    """One arm through ``incidents``; ``ages``: how long each pool's nodes have run at the start
    (`events.node_ages`; None: the scenario's seed's)."""
    from sim.outcome.gpuwarden_arm import Gpuwarden
    from sim.outcome.karpenter_arm import KarpenterDriver

    began = time.monotonic()
    engine = Engine(scenario.start)
    ledger = Ledger()
    with _aws(arm), _quiet_gpuwarden(), engine.sim:
        world = GangWorld(scenario, engine, ledger)
        world.ages = ages if ages is not None else node_ages(scenario, scenario.seed)
        on = arm is not Arm.NOTHING
        karpenter = KarpenterDriver(world, interruption_queue=on, consolidation=on)
        gpuwarden = Gpuwarden(world, policy or scenario.gpu_policy()) if arm is Arm.GPUWARDEN else None
        world.build()
        if gpuwarden is not None:
            gpuwarden.start(days)
        hits: dict[str, list[str]] = {}
        chains: dict[str, list[str]] = {}
        seen = [0]

        def fire(incident: Incident) -> None:
            nodes = _resolve(world, incident, chains)
            hits[incident.id] = nodes
            seen[0] += 1
            if not nodes:
                ledger.count("incidents_missed")
                return
            _ec2(world, incident, nodes)
            world.count_hits(incident.kind.value, nodes)
            if incident.kind is IncidentKind.CAPACITY_BLOCK_END:
                karpenter.close_pool(incident.pool)  # EC2 launches nothing more into an ending block
            karpenter.on_incident(incident, nodes)
            if gpuwarden is not None:
                gpuwarden.on_incident(incident, nodes)

        for incident in incidents:
            engine.at(incident.at, partial(fire, incident))
        end = days * 86400.0
        if progress is not None:
            for hour in range(1, int(end // 3600) + 1):
                engine.at(hour * 3600.0, partial(_report, progress, f"{label}{arm.value}", hour * 3600.0 / end, seen))
        engine.run_until(end)
        ledger.close(end)
    return ArmResult(
        arm=arm,
        figures=ledger.figures(),
        ledger=ledger,
        seconds=time.monotonic() - began,
        engine_steps=engine.steps,
        failures=list(gpuwarden.failures) if gpuwarden else [],
        incidents=hits,
        gpuwarden_results=list(gpuwarden.results) if gpuwarden else [],
        gpuwarden_ledger=gpuwarden.deps.ledger if gpuwarden else None,
    )


def _report(progress: Progress, what: str, fraction: float, seen: list[int]) -> None:
    progress(what, fraction, seen[0])


def _resolve(world: World, incident: Incident, chains: dict[str, list[str]]) -> list[str]:
    """The nodes an incident hits in this arm (the whole block for a Capacity Block's end)."""
    if incident.kind is IncidentKind.CAPACITY_BLOCK_END:
        return world.live_nodes(incident.pool)
    if incident.chain in chains:
        return [n for n in chains[incident.chain] if n in world.node_pods]
    live = world.workload_order(incident.pool)
    nodes = [live[incident.rank % len(live)]] if live else []
    chains[incident.chain] = nodes
    return nodes


def _ec2(world: World, incident: Incident, nodes: list[str]) -> None:
    """What EC2 itself does: the instance is gone at the incident's deadline, whoever reacted."""
    now = world.engine.now()
    for node in nodes:
        world.ledger.note(now, node, f"{incident.kind.value} notice")
    if incident.lead is None:
        return
    if incident.kind is IncidentKind.SPOT_INTERRUPTION:
        world.ledger.count("interruptions", len(nodes))
    for node in nodes:
        world.ledger.instance_ends.setdefault(node, incident.at + incident.lead)
        world.engine.at(incident.at + incident.lead, partial(world.terminate_instance, node, "deadline"))


def run(
    scenario: Scenario,
    seed: int | None = None,
    days: float | None = None,
    policy: Any = None,
    arms: tuple[Arm, ...] = ARMS,
    progress: Progress | None = None,
    prices: PriceTable | None = None,
    label: str = "",
) -> Outcome:
    """Every arm through the same incidents. `label` prefixes the progress reports ("seed 9, ")."""
    seed = scenario.seed if seed is None else seed
    days = scenario.days if days is None else days
    incidents = generate(scenario, seed, days)
    ages = node_ages(scenario, seed)
    results = [
        run_arm(scenario, arm, [] if arm is Arm.BASELINE else incidents, days, policy, progress, label, ages)
        for arm in arms
    ]
    return Outcome(scenario, seed, days, incidents, results, prices)
