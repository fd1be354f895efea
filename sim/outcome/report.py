"""What `gpuwarden simulate` prints: the table, rendered from the JSON document `--json` prints
(`Outcome.to_json()`, with `headline`), so the two never disagree. Every row is explained in
docs/simulate.md#the-table."""

from __future__ import annotations

from typing import Any

from sim.outcome.costs import per_week
from sim.outcome.multinode import ROWS as MULTI_NODE_ROWS
from sim.outcome.seeds import headline_lines

ROWS = (
    ("ettr", "goodput (ETTR), training"),
    ("restart_overhead_gpu_minutes", "  restart overhead (GPU-minutes)"),
    ("checkpoint_pause_gpu_minutes", "  checkpoint pauses (GPU-minutes)"),
    ("training_gpu_minutes_lost", "training lost (GPU-minutes)"),
    ("pods_lost_work", "pods that lost work"),
    ("checkpoints_requested", "checkpoints requested"),
    ("checkpoints_acked", "checkpoints acked"),
    ("checkpoints_timed_out", "checkpoints timed out"),
    ("saved_on_sigterm", "checkpoints saved on SIGTERM"),
    ("idle_gpu_hours", "idle GPU-hours paid"),
    ("evictions_blocked_by_pdb", "evictions blocked by PDBs"),
    ("nodes_past_deadline", "nodes drained past deadline"),
    ("replacements_launched", "nodes launched during the run"),
    ("replacements_unused", "  of which never ran a pod"),
    ("interruptions", "Spot interruptions"),
    ("nodes_expired_by_karpenter", "nodes Karpenter expired"),
    ("training_lost_to_expiry", "  lost on expiring nodes (GPU-min)"),
    ("gpuwarden_invocations", "gpuwarden invocations"),
)

COST_ROWS = (
    ("compute", "compute (USD)"),
    ("idle", "  of which idle GPUs (USD)"),
    ("lost_work", "lost training (USD)"),
    ("restart_overhead", "restart overhead (USD)"),
    ("total", "compute + lost training (USD)"),
)

WIDTH = 36


def _row(label: str, values: list[Any]) -> str:
    return f"{label:<{WIDTH}}  " + "  ".join(f"{v:>12}" for v in values)


def _cell(key: str, value: Any) -> Any:
    """ETTR as a percentage; any other figure as it is."""
    return f"{float(value):.2%}" if key == "ettr" else value


def render(doc: dict[str, Any]) -> str:
    """The whole text: the run's table, its causes and dollars, the multi-node jobs, the headline
    over seeds (when the document has one), and the verdict last."""
    arms = doc["arms"]
    lines = [
        f"scenario {doc['scenario']}, seed {doc['seed']}, {doc['days']:g} days: "
        + ", ".join(f"{n} {k}" for k, n in doc["incidents"].items()),
        "",
        _row("", list(arms)),
    ]
    lines += [_row(label, [_cell(key, a.get(key, 0)) for a in arms.values()]) for key, label in ROWS]
    lines += _cause_lines(arms)
    lines += _cost_lines(doc)
    lines += _multi_node_lines(doc.get("multi_node_jobs") or {})
    for arm, figures in arms.items():
        lines += [f"{arm}: gpuwarden did not handle {failure}" for failure in figures.get("gpuwarden_failures", [])]
    if doc.get("headline"):
        lines += headline_lines(doc["headline"])
    if doc.get("plot"):
        lines += ["", f"plot: {doc['plot']}"]
    if doc.get("verdict"):
        lines += ["", doc["verdict"]]
    return "\n".join(lines)


def _cause_lines(arms: dict[str, Any]) -> list[str]:
    causes = sorted({c for a in arms.values() for c in a.get("training_lost_by_cause", {})})
    if not causes:
        return []
    lines = ["training lost by cause (GPU-minutes; docs/simulate.md#causes)"]
    for cause in causes:
        lines.append(_row(f"  {cause}", [f"{a['training_lost_by_cause'].get(cause, 0.0):.1f}" for a in arms.values()]))
    return lines


def _cost_lines(doc: dict[str, Any]) -> list[str]:
    arms = doc["arms"]
    if "prices" not in doc or not all("cost_usd" in a for a in arms.values()):
        return []
    prices = doc["prices"]
    lines = ["", f"in dollars, prices as of {prices['as_of']} ({prices['currency']} per instance-hour, Linux)"]
    lines += [_row(label, [f"{a['cost_usd'].get(key, 0):,.0f}" for a in arms.values()]) for key, label in COST_ROWS]
    if "karpenter" in arms:
        theirs = arms["karpenter"]["cost_usd"]["total"]
        saved = [per_week(theirs - a["cost_usd"]["total"], doc["days"]) for a in arms.values()]
        lines.append(_row("saved per week vs Karpenter (USD)", [f"{s:,.0f}" for s in saved]))
    return lines


def _multi_node_lines(per_arm: dict[str, Any]) -> list[str]:
    if not any(f["jobs"] for f in per_arm.values()):
        return []
    jobs = next(iter(per_arm.values()))["jobs"]
    lines = ["", f"multi-node training jobs ({jobs}; every rank restarts when one stops)"]
    lines.append(_row("", list(per_arm)))
    lines += [_row(label, [_cell(key, f.get(key, 0)) for f in per_arm.values()]) for key, label in MULTI_NODE_ROWS]
    jobs_ettr = sorted({job for f in per_arm.values() for job in f.get("ettr_per_job", {})})
    lines += [
        _row(f"  ETTR of {job}", [_cell("ettr", f.get("ettr_per_job", {}).get(job, 0)) for f in per_arm.values()])
        for job in jobs_ettr
    ]
    return lines
