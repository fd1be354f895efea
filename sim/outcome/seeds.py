"""The headline across several seeds: training lost per arm as mean and spread over independent
runs, and how many interruptions each figure rests on.

One week holds a handful of Spot interruptions, so one week's "GPU-minutes saved" rests on one
or two events. The headline runs the scenario's training pools alone (the pools share nothing
in this model: each node's incidents come from its own seeded stream, each workload binds to its
own pool, so a pool's figures are the same run alone or beside the others) for `seeds`
consecutive seeds from the scenario's, and reports per run: the mean, the sample standard
deviation, the smallest and largest, and the incidents they stand on.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from sim.outcome.causes import attribute, by_cause
from sim.outcome.multinode import figures as multinode_figures
from sim.outcome.prices import PriceTable
from sim.outcome.runner import ARMS, Arm, Outcome, Progress, run
from sim.outcome.scenario import Scenario


def spot_training(scenario: Scenario) -> Scenario:
    """The scenario with only its Spot pools that run training (and their training): where the
    draws differ from seed to seed (a Capacity Block ends at the same hour in every run)."""
    pools = {t.pool for t in scenario.training} & {p.name for p in scenario.pools if p.capacity_type == "spot"}
    doc = scenario.model_dump(mode="json")
    doc |= {
        "pools": [p for p in doc["pools"] if p["name"] in pools],
        "training": [t for t in doc["training"] if t["pool"] in pools],
        "inference": [],
        "notebooks": [],
    }
    return Scenario.model_validate(doc)


@dataclass(frozen=True)
class Spread:
    values: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        vals = self.values
        return {
            "mean": round(statistics.fmean(vals), 1) if vals else 0.0,
            "sd": round(statistics.stdev(vals), 1) if len(vals) > 1 else 0.0,
            "min": round(min(vals), 1) if vals else 0.0,
            "max": round(max(vals), 1) if vals else 0.0,
        }


@dataclass
class Headline:
    seeds: list[int]
    days: float
    outcomes: list[Outcome]

    def _per_arm(self, arm: Arm) -> dict[str, Any]:
        results = [next(r for r in o.arms if r.arm is arm) for o in self.outcomes]
        multi = [multinode_figures(r) for r in results]
        runs = max(len(results), 1)
        causes: dict[str, float] = {}
        for result in results:
            for cause, minutes in by_cause(attribute(result)).items():
                causes[cause] = causes.get(cause, 0.0) + minutes
        doc = {
            "ettr": Spread(tuple(100.0 * r.figures["ettr"] for r in results)).to_json(),
            "multi_node_ettr": Spread(tuple(100.0 * m["ettr"] for m in multi)).to_json(),
            "restart_overhead_gpu_minutes": Spread(
                tuple(r.figures["restart_overhead_gpu_minutes"] for r in results)
            ).to_json(),
            "training_gpu_minutes_lost": Spread(
                tuple(r.figures["training_gpu_minutes_lost"] for r in results)
            ).to_json(),
            "training_lost_by_cause_mean": {
                k: round(v / runs, 1) for k, v in sorted(causes.items(), key=lambda kv: -kv[1])
            },
            "multi_node_training_gpu_minutes_lost": Spread(
                tuple(m["training_gpu_minutes_lost"] for m in multi)
            ).to_json(),
            "spot_interruptions": sum(r.figures["interruptions"] for r in results),
            "multi_node_spot_interruptions": sum(m["spot_interruptions"] for m in multi),
            "multi_node_incidents": sum(m["incidents"] for m in multi),
            "multi_node_job_restarts": sum(m["job_restarts"] for m in multi),
            "multi_node_job_restarts_losing_work": sum(m["job_restarts_losing_work"] for m in multi),
            "gpuwarden_failures": sum(len(r.failures) for r in results),
        }
        costs = [o.costs().get(arm.value) for o in self.outcomes]
        if all(c is not None for c in costs) and costs:
            doc["lost_work_usd"] = Spread(tuple(c["lost_work"] for c in costs if c is not None)).to_json()
        return doc

    def ettr(self, arm: Arm) -> list[float]:
        return [float(next(r for r in o.arms if r.arm is arm).figures["ettr"]) for o in self.outcomes]

    def weeks(self) -> dict[str, int]:
        """In how many of the runs gpuwarden's ETTR is above Karpenter alone's, and within 1 % of the
        same week with no incident (docs/simulate.md#goodput)."""
        arms = {r.arm for r in self.outcomes[0].arms} if self.outcomes else set()
        if not {Arm.GPUWARDEN, Arm.KARPENTER} <= arms:
            return {}
        ours, theirs = self.ettr(Arm.GPUWARDEN), self.ettr(Arm.KARPENTER)
        doc = {"runs": len(ours), "gpuwarden_ahead": sum(1 for a, b in zip(ours, theirs, strict=True) if a > b)}
        doc["gpuwarden_behind"] = sum(1 for a, b in zip(ours, theirs, strict=True) if a < b)
        if Arm.BASELINE in arms:
            best = self.ettr(Arm.BASELINE)
            doc["gpuwarden_within_1pc_of_no_incidents"] = sum(
                1 for a, b in zip(ours, best, strict=True) if a >= 0.99 * b
            )
        return doc

    def ahead(self) -> str:
        """What the verdict says of the headline: in how many weeks gpuwarden is ahead."""
        weeks = self.weeks()
        if not weeks:
            return ""
        return f"; ahead in {weeks['gpuwarden_ahead']} of {weeks['runs']} weeks of the headline"

    def to_json(self) -> dict[str, Any]:
        arms = [r.arm for r in self.outcomes[0].arms] if self.outcomes else []
        return {
            "what": "the Spot training pools alone, one run per seed; per run: mean, sample sd, min, max",
            "seeds": self.seeds,
            "days_per_run": self.days,
            "arms": {arm.value: self._per_arm(arm) for arm in arms},
            "weeks": self.weeks(),
        }


def run_headline(
    scenario: Scenario,
    seeds: int,
    days: float | None = None,
    policy: Any = None,
    arms: tuple[Arm, ...] = ARMS,
    progress: Progress | None = None,
    prices: PriceTable | None = None,
) -> Headline:
    sub = spot_training(scenario)
    days = scenario.days if days is None else days
    chosen = [scenario.seed + i for i in range(seeds)]
    outcomes = [
        run(sub, seed=s, days=days, policy=policy, arms=arms, progress=progress, prices=prices, label=_label(i, chosen))
        for i, s in enumerate(chosen)
    ]
    return Headline(chosen, days, outcomes)


def _label(index: int, seeds: list[int]) -> str:
    return f"headline {index + 1}/{len(seeds)} (seed {seeds[index]}), "


def headline_lines(doc: dict[str, Any]) -> list[str]:
    """The headline's table, from its JSON (`Headline.to_json()`)."""
    arms = doc["arms"]
    if not arms:
        return []
    seeds = doc["seeds"]
    lines = [
        "",
        f"headline: the Spot training pools alone, {len(seeds)} runs of {doc['days_per_run']:g} days"
        f" (seeds {seeds[0]}-{seeds[-1]}); GPU-minutes lost per run, mean ± sd [min-max]",
        f"{'':<34}  " + "  ".join(f"{a:>22}" for a in arms),
    ]

    def cell(figure: dict[str, float]) -> str:
        return f"{figure['mean']:.0f} ± {figure['sd']:.0f} [{figure['min']:.0f}-{figure['max']:.0f}]"

    def dollars(figure: dict[str, float]) -> str:
        return f"${figure['mean']:,.0f} ± {figure['sd']:,.0f}"

    def percent(figure: dict[str, float]) -> str:
        return f"{figure['mean']:.2f} ± {figure['sd']:.2f} %"

    rows: list[tuple[str, str, Any]] = [
        ("goodput (ETTR), all jobs", "ettr", percent),
        ("goodput (ETTR), multi-node jobs", "multi_node_ettr", percent),
        ("restart overhead (GPU-minutes)", "restart_overhead_gpu_minutes", cell),
        ("training lost, all jobs", "training_gpu_minutes_lost", cell),
        ("  resting on Spot interruptions", "spot_interruptions", str),
        ("training lost, multi-node jobs", "multi_node_training_gpu_minutes_lost", cell),
        ("  resting on Spot interruptions", "multi_node_spot_interruptions", str),
        ("  incidents on their nodes", "multi_node_incidents", str),
        ("  job restarts", "multi_node_job_restarts", str),
        ("    of which lost work", "multi_node_job_restarts_losing_work", str),
    ]
    if all("lost_work_usd" in a for a in arms.values()):
        rows.append(("lost work per run (USD)", "lost_work_usd", dollars))
    for label, key, show in rows:
        lines.append(f"{label:<34}  " + "  ".join(f"{show(a[key]):>22}" for a in arms.values()))
    causes = sorted({c for a in arms.values() for c in a["training_lost_by_cause_mean"]})
    if causes:
        lines.append("GPU-minutes lost per run, by cause (mean; docs/simulate.md#causes)")
        for cause in causes:
            values = [f"{a['training_lost_by_cause_mean'].get(cause, 0.0):.0f}" for a in arms.values()]
            lines.append(f"  {cause:<32}  " + "  ".join(f"{v:>22}" for v in values))
    return lines + _weeks_lines(doc.get("weeks") or {})


def _weeks_lines(weeks: dict[str, int]) -> list[str]:
    """In how many weeks gpuwarden's ETTR is ahead (`Headline.weeks`)."""
    if not weeks:
        return []
    line = f"gpuwarden's ETTR above Karpenter alone's in {weeks['gpuwarden_ahead']} of {weeks['runs']} weeks"
    line += f", below in {weeks['gpuwarden_behind']}"
    if "gpuwarden_within_1pc_of_no_incidents" in weeks:
        line += f"; within 1 % of no incident in {weeks['gpuwarden_within_1pc_of_no_incidents']}"
    return [line]
