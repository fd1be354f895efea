"""The scenario's incidents: what AWS does to the cluster, drawn once from a seeded RNG.

Every arm replays the same list. An incident names a pool and a rank, not a node: each arm
resolves it to `live_nodes[rank % len(live_nodes)]` of that pool when it happens (the arms'
nodes differ once replacements start), and an incident that finds no live node is recorded
as missed, in every arm the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from sim.outcome.scenario import MONTH_SECONDS, Scenario

_RANKS = 1 << 30


class IncidentKind(StrEnum):
    SPOT_INTERRUPTION = "spot-interruption"
    REBALANCE = "rebalance"
    MAINTENANCE = "scheduled-maintenance"
    CAPACITY_BLOCK_END = "capacity-block-expiry"


@dataclass(frozen=True)
class Incident:
    at: float  # seconds after the scenario's start
    kind: IncidentKind
    pool: str
    rank: int
    #: seconds from `at` until the instance is gone (None: it stays)
    lead: float | None
    id: str
    #: incidents of one chain (a rebalance recommendation and the interruption after it) hit one node
    chain: str


def generate(scenario: Scenario, seed: int, days: float) -> list[Incident]:
    """All incidents of the run, sorted by time; the same seed gives the same list."""
    draw = _Draw(random.Random(seed), days * 86400.0)  # noqa: S311 - a simulation, not a secret
    for pool in scenario.pools:
        itype = scenario.instance_type(pool.instance_type)
        for slot in range(pool.nodes):  # one independent process per node the pool runs
            # its own stream: a longer run keeps the shorter run's incidents (string seeds hash with SHA-512)
            draw.rng = random.Random(f"{seed}:{pool.name}:{slot}")  # noqa: S311 - a simulation, not a secret
            if pool.capacity_type == "spot":
                draw.spot(scenario, pool.name, itype.spot_band.rate_per_second)
            notice = scenario.maintenance.notice_hours * 3600
            for at in draw.poisson(pool.maintenance_per_node_month / MONTH_SECONDS):
                draw.add(at, IncidentKind.MAINTENANCE, pool.name, notice, draw.chain())
        if pool.capacity_block_end_hours is not None:
            # "Capacity Block Reservation Expiration Warning 40 minutes before [the block] expires, with
            # instances being reclaimed 30 minutes before" (EC2 User Guide, Capacity Blocks monitoring)
            warning = pool.capacity_block_end_hours * 3600 - 40 * 60
            if 0 <= warning < draw.horizon:
                draw.add(warning, IncidentKind.CAPACITY_BLOCK_END, pool.name, 10 * 60, draw.chain())
    return sorted(draw.out, key=lambda i: (i.at, i.id))


def node_ages(scenario: Scenario, seed: int) -> dict[str, list[float]]:
    """Seconds each of a pool's nodes has run when the run starts, for pools whose nodes expire
    (`expire_after_hours`): uniform over [0, expireAfter), as in a pool that has run longer than
    its expireAfter and replaced each node when it expired. Each node its own stream, like the
    incidents: the same seed gives the same ages, so the same expiries inside the run."""
    ages: dict[str, list[float]] = {}
    for pool in scenario.pools:
        if pool.expire_after_hours is None:
            continue
        span = pool.expire_after_hours * 3600.0
        ages[pool.name] = [
            random.Random(f"{seed}:{pool.name}:{slot}:age").uniform(0.0, span)  # noqa: S311 - a simulation
            for slot in range(pool.nodes)
        ]
    return ages


class _Draw:
    def __init__(self, rng: random.Random, horizon: float) -> None:
        self.rng = rng
        self.horizon = horizon
        self.out: list[Incident] = []
        self._chains = 0

    def chain(self) -> tuple[str, int]:
        self._chains += 1
        return f"c{self._chains:05d}", self.rng.randrange(_RANKS)

    def add(self, at: float, kind: IncidentKind, pool: str, lead: float | None, chain: tuple[str, int]) -> None:
        self.out.append(Incident(at, kind, pool, chain[1], lead, f"{kind.value}-{len(self.out):05d}", chain[0]))

    def poisson(self, rate: float) -> list[float]:
        times: list[float] = []
        if rate <= 0:
            return times
        t = self.rng.expovariate(rate)
        while t < self.horizon:
            times.append(t)
            t += self.rng.expovariate(rate)
        return times

    def spot(self, scenario: Scenario, pool: str, rate: float) -> None:
        reb = scenario.rebalance
        for at in self.poisson(rate):
            chain = self.chain()
            if self.rng.random() < reb.before_interruption:
                lead = self.rng.uniform(reb.lead_minutes_min, reb.lead_minutes_max) * 60
                if at - lead >= 0:
                    self.add(at - lead, IncidentKind.REBALANCE, pool, None, chain)
            self.add(at, IncidentKind.SPOT_INTERRUPTION, pool, 120.0, chain)  # the two-minute warning (EC2 docs)
        for at in self.poisson(reb.false_per_node_month / MONTH_SECONDS):
            self.add(at, IncidentKind.REBALANCE, pool, None, self.chain())
