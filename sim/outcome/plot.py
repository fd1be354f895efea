"""`--plot`: lost GPU-minutes and idle GPU-hours per arm, and one interruption's timeline in each arm."""

from __future__ import annotations

from pathlib import Path

from sim.outcome.events import IncidentKind
from sim.outcome.runner import ArmResult, Outcome

COLORS = {"nothing": "#9e9e9e", "karpenter": "#f5a623", "gpuwarden": "#2e7d32"}
_WINDOW = (-30.0, 420.0)  # seconds around the notice shown in the timelines


class PlotUnavailable(RuntimeError):
    pass


def _timeline(result: ArmResult, incident_id: str, at: float) -> list[tuple[float, str]]:
    nodes = set(result.incidents.get(incident_id, []))
    pods = {what.split(":", 1)[0] for t, node, what in result.ledger.trace if node in nodes and ": " in what}
    events: list[tuple[float, str]] = []
    for t, node, what in result.ledger.trace:
        rel = t - at
        if not _WINDOW[0] <= rel <= _WINDOW[1]:
            continue
        if node in nodes or any(what.startswith(p) for p in pods):
            events.append((rel, what[:70]))
    return events[:14]


def write_plot(outcome: Outcome, path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'gpuwarden[dev]' (or matplotlib)") from err
    arms = [r.arm.value for r in outcome.arms]
    colors = [COLORS.get(a, "#607d8b") for a in arms]
    spot = next((i for i in outcome.incidents if i.kind is IncidentKind.SPOT_INTERRUPTION), None)
    rows = 1 + (len(outcome.arms) if spot else 0)
    fig = plt.figure(figsize=(13, 3.2 + 2.6 * (rows - 1)))
    grid = fig.add_gridspec(rows, 2)
    for col, (key, label) in enumerate(
        (("training_gpu_minutes_lost", "training lost (GPU-minutes)"), ("idle_gpu_hours", "idle GPU-hours paid"))
    ):
        ax = fig.add_subplot(grid[0, col])
        values = [float(r.figures[key]) for r in outcome.arms]
        bars = ax.bar(arms, values, color=colors)
        ax.bar_label(bars, fmt="%.0f")
        ax.set_title(label)
    if spot is not None:
        for row, result in enumerate(outcome.arms, start=1):
            ax = fig.add_subplot(grid[row, :])
            events = _timeline(result, spot.id, spot.at)
            for y, (t, what) in enumerate(events):
                ax.plot([t], [y], "o", color=COLORS.get(result.arm.value, "#607d8b"))
                ax.annotate(f"{t:+.0f}s {what}", (t, y), xytext=(6, -3), textcoords="offset points", fontsize=7)
            ax.axvline(0, color="#555", lw=0.8)
            ax.axvline(spot.lead or 120, color="#c62828", lw=0.8, ls="--")
            ax.set_xlim(*_WINDOW)
            ax.set_ylim(-1, max(len(events), 1))
            ax.set_yticks([])
            ax.set_title(f"{result.arm.value}: {spot.id} (notice at 0 s, instance gone at the dashed line)", fontsize=9)
    fig.suptitle(f"{outcome.scenario.name}, seed {outcome.seed}, {outcome.days:g} days")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
