"""`--plot`: the table's figures per arm as bars (lost GPU-minutes, idle GPU-hours, dollars), and the
first Spot interruption's timeline in each arm (docs/simulate.md#the-plot).

The bars are drawn from the same figures the table prints, and the PNG carries them in its
`gpuwarden:figures` text chunk, so a test (and anyone) can check the picture against the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.outcome.costs import net_per_week
from sim.outcome.events import Incident, IncidentKind
from sim.outcome.runner import ArmResult, Outcome

COLORS = {"nothing": "#9e9e9e", "karpenter": "#f5a623", "gpuwarden": "#2e7d32"}
METADATA_KEY = "gpuwarden:figures"
#: what the timelines leave out: Karpenter's bookkeeping of nodes and NodeClaims, one line each
_NOISE = ("node-deleted", "nodeclaim-", "pod-gc", "instance-terminating", "node-finalized", "drained", "launched")


class PlotUnavailable(RuntimeError):
    pass


def bars(outcome: Outcome) -> dict[str, dict[str, float]]:
    """What the bars show, per arm: the table's own figures."""
    costs = outcome.costs()
    drawn: dict[str, dict[str, float]] = {}
    for r in outcome.arms:
        one = {
            "training_gpu_minutes_lost": float(r.figures["training_gpu_minutes_lost"]),
            "idle_gpu_hours": float(r.figures["idle_gpu_hours"]),
        }
        if costs and "karpenter" in costs:
            saved = net_per_week(costs, outcome.days, "karpenter", r.arm.value)["total"]
            one |= {"total_usd": costs[r.arm.value]["total"], "saved_per_week_usd": saved}
        drawn[r.arm.value] = one
    return drawn


def timeline(result: ArmResult, incident: Incident) -> list[tuple[float, str]]:
    """(seconds after the notice, what happened) on the incident's nodes and to their pods and jobs,
    from the notice until the last of it."""
    nodes = set(result.incidents.get(incident.id, []))
    pods = {what.split(":", 1)[0] for t, node, what in result.ledger.trace if node in nodes and ": " in what}
    jobs = {what.split(":", 1)[0] for t, node, what in result.ledger.trace if what.startswith("job ") and node in nodes}
    events: list[tuple[float, str]] = []
    for t, node, what in result.ledger.trace:
        rel = t - incident.at
        if not -1 <= rel <= 900 or any(noise in what for noise in _NOISE):
            continue
        mine = node in nodes or any(what.startswith(p) for p in pods | jobs)
        if not mine and not any(what.endswith(p) for p in pods):
            continue
        if what.startswith("gpuwarden "):
            what = what.split(" - ", 1)[0]  # the kind and outcome; the reason is in the JSON
        events.append((rel, what))
    return events


def write_plot(outcome: Outcome, path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'gpuwarden[dev]' (or matplotlib)") from err
    drawn = bars(outcome)
    arms = list(drawn)
    colors = [COLORS.get(a, "#607d8b") for a in arms]
    spot = next((i for i in outcome.incidents if i.kind is IncidentKind.SPOT_INTERRUPTION), None)
    lanes = {r.arm.value: timeline(r, spot) for r in outcome.arms} if spot is not None else {}
    heights = [3.4] + [0.6 + 0.24 * max(len(e), 1) for e in lanes.values()]
    fig = plt.figure(figsize=(14, sum(heights) + 0.8))
    grid = fig.add_gridspec(len(heights), 3, height_ratios=heights)
    panels = [
        ("training_gpu_minutes_lost", "training lost", "GPU-minutes", "%.0f"),
        ("idle_gpu_hours", "idle GPUs paid for", "GPU-hours", "%.0f"),
    ]
    for col, (key, title, unit, fmt) in enumerate(panels):
        ax = fig.add_subplot(grid[0, col])
        shown = ax.bar(arms, [drawn[a][key] for a in arms], color=colors)
        ax.bar_label(shown, fmt=fmt, padding=2)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.margins(y=0.18)
    if all("saved_per_week_usd" in drawn[a] for a in arms):
        ax = fig.add_subplot(grid[0, 2])
        saved = [drawn[a]["saved_per_week_usd"] for a in arms]
        shown = ax.bar(arms, saved, color=colors)
        ax.bar_label(shown, labels=[f"-${-v:,.0f}" if v < 0 else f"${v:,.0f}" for v in saved], padding=2)
        ax.axhline(0, color="#555", lw=0.8)
        ax.set_title("saved against Karpenter alone, per week")
        ax.set_ylabel("USD per week")
        ax.margins(y=0.25)
    if spot is not None:
        for row, (arm, events) in enumerate(lanes.items(), start=1):
            _lane(fig.add_subplot(grid[row, :]), arm, events, spot)
    fig.suptitle(f"{outcome.scenario.name}, seed {outcome.seed}, {outcome.days:g} days")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={METADATA_KEY: json.dumps(drawn, sort_keys=True)})
    plt.close(fig)
    return path


def _lane(ax: Any, arm: str, events: list[tuple[float, str]], spot: Incident) -> None:
    end = spot.lead or 120.0
    right = max([end + 30.0, *(t + 20.0 for t, _ in events)])
    ax.set_xlim(-10.0, right)
    ax.set_ylim(-1, max(len(events), 1))
    for y, (t, what) in enumerate(events):
        ax.plot([t], [y], "o", color=COLORS.get(arm, "#607d8b"))
        leftward = t > (right - 10.0) / 2  # text on the side with room: nothing runs off the axes
        ax.annotate(
            f"{round(t) + 0:+d} s {what}",
            (t, y),
            xytext=(-6 if leftward else 6, -3),
            textcoords="offset points",
            ha="right" if leftward else "left",
            fontsize=7,
        )
    ax.axvline(0, color="#555", lw=0.8)
    ax.axvline(end, color="#c62828", lw=0.8, ls="--")
    ax.set_yticks([])
    ax.set_xlabel("seconds after the Spot notice")
    ax.set_title(f"{arm}: {spot.id} (notice at 0 s, instance gone at the dashed line, {end:.0f} s)", fontsize=9)
