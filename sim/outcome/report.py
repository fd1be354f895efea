"""The three-arm table (terminal) and the JSON document (--json)."""

from __future__ import annotations

from sim.outcome.multinode import table_lines
from sim.outcome.runner import Outcome

ROWS = (
    ("training_gpu_minutes_lost", "training lost (GPU-minutes)"),
    ("pods_lost_work", "pods that lost work"),
    ("checkpoints_requested", "checkpoints requested"),
    ("checkpoints_acked", "checkpoints acked"),
    ("checkpoints_timed_out", "checkpoints timed out"),
    ("saved_on_sigterm", "checkpoints saved on SIGTERM"),
    ("idle_gpu_hours", "idle GPU-hours paid"),
    ("evictions_blocked_by_pdb", "evictions blocked by PDBs"),
    ("nodes_past_deadline", "nodes drained past deadline"),
    ("replacements_launched", "replacements launched"),
    ("replacements_unused", "replacements unused"),
    ("interruptions", "Spot interruptions"),
    ("gpuwarden_invocations", "gpuwarden invocations"),
)


def table(outcome: Outcome) -> str:
    arms = [r.arm.value for r in outcome.arms]
    width = max(len(label) for _, label in ROWS)
    lines = [
        f"scenario {outcome.scenario.name}, seed {outcome.seed}, {outcome.days:g} days: "
        + ", ".join(f"{n} {k}" for k, n in outcome.to_json()["incidents"].items()),
        "",
        f"{'':<{width}}  " + "  ".join(f"{a:>10}" for a in arms),
    ]
    for key, label in ROWS:
        values = [r.figures.get(key, 0) for r in outcome.arms]
        lines.append(f"{label:<{width}}  " + "  ".join(f"{v:>10}" for v in values))
    lines.append(f"{'real seconds':<{width}}  " + "  ".join(f"{r.seconds:>10.1f}" for r in outcome.arms))
    lines += table_lines(outcome)
    for r in outcome.arms:
        for failure in r.failures:
            lines.append(f"{r.arm.value}: gpuwarden did not handle {failure}")
    return "\n".join(lines)
