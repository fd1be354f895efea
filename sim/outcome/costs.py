"""Each arm in dollars (docs/simulate.md#what-it-costs): the instance-hours it ran (idle GPUs
included) and the GPU-minutes of training it lost, at the price table's hourly prices; the
difference per week between arms, and the one-line verdict."""

from __future__ import annotations

from typing import Any

from sim.outcome.prices import SECONDS_PER_HOUR, PriceTable
from sim.outcome.scenario import Scenario

# An ArmResult of sim.outcome.runner (which imports this module): typed loosely here.
ArmResult = Any

WEEK_DAYS = 7.0


def arm_costs(result: ArmResult, scenario: Scenario, prices: PriceTable) -> dict[str, float]:
    """USD: `compute` (every node's hours at its pool's price), of which `idle` (GPU-hours with every
    GPU idle, at the price of one GPU of the node), `lost_work` (lost GPU-minutes at the same price of
    one GPU), and `total` = compute + lost_work."""
    ledger = result.ledger
    per_gpu_hour: dict[str, float] = {}
    compute = idle = 0.0
    for name, book in ledger.nodes.items():
        pool = scenario.pool(book.pool)
        hourly = prices.hourly(pool.instance_type, pool.capacity_type)
        per_gpu_hour[name] = hourly / max(book.gpus, 1)
        up = (book.down_at if book.down_at is not None else ledger.ended_at) - book.up_at
        compute += hourly * max(up, 0.0) / SECONDS_PER_HOUR
        idle += per_gpu_hour[name] * book.idle_gpu_seconds / SECONDS_PER_HOUR
    lost = sum(loss.gpu_minutes / 60.0 * per_gpu_hour.get(loss.node, 0.0) for loss in ledger.losses)
    overhead = _overhead_usd(result, scenario, prices)
    compute, lost = round(compute, 2), round(lost, 2)
    return {
        "compute": compute,
        "idle": round(idle, 2),
        "lost_work": lost,
        "restart_overhead": overhead,
        "total": round(compute + lost + overhead, 2),
    }


def _overhead_usd(result: ArmResult, scenario: Scenario, prices: PriceTable) -> float:
    """The restarts' overhead GPU-time (docs/simulate.md#goodput) at one GPU's price of its job's pool:
    GPU time the job spends again before it trains, as lost work is GPU time it trains again."""
    pools = {t.name: scenario.pool(t.pool) for t in scenario.training}
    usd = 0.0
    for job, clock in result.ledger.goodput.jobs.items():
        pool = pools.get(job.rsplit("-", 1)[0])
        if pool is None or clock.overhead <= 0:
            continue
        gpus = scenario.instance_type(pool.instance_type).gpus
        usd += (
            clock.gpus
            * clock.overhead
            / SECONDS_PER_HOUR
            * prices.hourly(pool.instance_type, pool.capacity_type)
            / gpus
        )
    return round(usd, 2)


def per_week(dollars: float, days: float) -> float:
    return dollars * WEEK_DAYS / days if days > 0 else 0.0


def net_per_week(costs: dict[str, dict[str, float]], days: float, against: str, arm: str) -> dict[str, float]:
    """What `arm` saves per week against `against` (positive: it costs less), by part."""
    mine, theirs = costs[arm], costs[against]
    parts = ("compute", "lost_work", "restart_overhead", "total")
    return {part: round(per_week(theirs.get(part, 0.0) - mine.get(part, 0.0), days), 2) for part in parts}


def verdict(
    costs: dict[str, dict[str, float]],
    days: float,
    prices: PriceTable,
    goodput: dict[str, float] | None = None,
    ahead: str = "",
) -> str:
    """One line: goodput first (gpuwarden's ETTR against Karpenter alone's and the week with no
    incident; `ahead`: over how many weeks of the headline), then whether gpuwarden beside Karpenter
    pays against Karpenter alone, at these prices."""
    if "gpuwarden" not in costs or "karpenter" not in costs:
        return ""
    net = net_per_week(costs, days, "karpenter", "gpuwarden")
    parts = (
        f"compute {_signed(net['compute'])}, lost work {_signed(net['lost_work'])}, "
        f"restart overhead {_signed(net['restart_overhead'])} a week"
    )
    when = f"at the prices of {prices.as_of.isoformat()}"
    if days != WEEK_DAYS:  # a shorter or longer run is said as a week, and says so
        when = f"(a week: {WEEK_DAYS / days:.3g} times the {days:g} simulated day{'' if days == 1 else 's'}) {when}"
    if net["total"] >= 0:
        money = f"saves ${net['total']:,.0f} a week against Karpenter alone"
    else:
        money = f"costs ${-net['total']:,.0f} a week more than Karpenter alone"
    head = "verdict: gpuwarden beside Karpenter"
    goodput = goodput or {}
    if "gpuwarden" in goodput and "karpenter" in goodput:
        best = f", {goodput['no-incidents']:.2%} with no incident" if "no-incidents" in goodput else ""
        head += (
            f" keeps training goodput (ETTR) at {goodput['gpuwarden']:.2%} against Karpenter alone's"
            f" {goodput['karpenter']:.2%}{best}{ahead};"
        )
    return f"{head} {money} {when} ({parts}; gpuwarden's own AWS bill not counted)"


def _signed(saved: float) -> str:
    """A saving as what it does to the bill: -$120 (less), +$40 (more)."""
    return f"-${saved:,.0f}" if saved >= 0 else f"+${-saved:,.0f}"
