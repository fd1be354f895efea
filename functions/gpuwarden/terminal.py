"""What a person at a terminal reads (docs/cli.md): the drain's progress line, the runbook's answer
as text, doctor's table. The JSON answers are the same documents, printed as they are."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gpuwarden.services.doctor.doctor import DoctorReport
    from gpuwarden.services.runbook.actions import DrainProgress


class ProgressLine:
    """`draining ip-…: 12 left, 3 blocked by PDB serving/inference, 41 s`, updated in place."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.open = False

    def __call__(self, progress: DrainProgress) -> None:
        parts = [f"draining {progress.node}: {progress.remaining} left"]
        parts += [f"{count} blocked by PDB {pdb}" for pdb, count in sorted(progress.blocked.items())]
        if progress.waiting:
            parts.append(f"{progress.waiting} waiting on a checkpoint")
        parts.append(f"{progress.elapsed_seconds:.0f} s")
        self.stream.write("\r\x1b[K" + ", ".join(parts))
        self.open = True
        if progress.done:
            self.finish()
        self.stream.flush()

    def finish(self) -> None:
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


def plan_table(plan: list[dict[str, Any]]) -> list[str]:
    """POD / STEP / REASON, one row per pod on the node."""
    width = max([len("POD"), *(len(str(row["pod"])) for row in plan)])
    lines = [f"{'POD':<{width}}  {'STEP':<6}  REASON"]
    lines += [f"{row['pod']:<{width}}  {row['step']:<6}  {row['reason']}" for row in plan]
    return lines


def _status_lines(status: dict[str, Any]) -> list[str]:
    taints = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in status["taints"]) or "-"
    lines = [
        f"  cordoned: {status['unschedulable']} (by gpuwarden: {status['cordoned_by_gpuwarden']})",
        f"  taints: {taints}",
    ]
    lines += [f"  {key}: {value}" for key, value in (status.get("event") or {}).items() if value]
    lines += [
        f"  waiting on a checkpoint: {w['pod']} ({w['mode']}, until {w['requested_by']})"
        for w in status["waiting_for_checkpoint"]
    ]
    lines += [f"  blocked by PDB {b['pdb']}: {b['pod']}" for b in status["blocked_by_pdb"]]
    if status.get("ledger"):
        lines.append("  ledger: " + json.dumps(status["ledger"], default=str, sort_keys=True))
    return lines


def human_lines(result: dict[str, Any]) -> list[str]:
    """What a person at a terminal reads: the outcome and why, the plan table, what was done."""
    dry = " (dry run)" if result.get("dry_run") and result.get("outcome") != "dry-run" else ""
    lines = [f"{result.get('action', '?')} {result.get('node') or '?'}: {result['outcome']}{dry}"]
    lines.append(f"  {result['reason']}")
    if result.get("status"):
        lines += _status_lines(result["status"])
    if result.get("plan"):
        lines += ["", *plan_table(result["plan"])]
    shown = [a for a in result.get("actions") or [] if a["type"] != "eviction-blocked"]
    if shown:
        lines += ["", "actions:"]
        for action in shown:
            what = action.get("pod") or action.get("target") or action.get("taint") or ""
            why = action.get("reason") or action.get("result") or ""
            lines.append(f"  {action['type']:<22} {what}  {why}".rstrip())
    return lines


_MARK = {"ok": "ok", "warn": "WARN", "error": "ERROR"}


def doctor_table(report: DoctorReport) -> str:
    """CHECK / SEVERITY / MESSAGE, with the fix under each finding that has one to do."""
    width = max(len(f.check) for f in report.findings)
    lines = [f"{'CHECK':<{width}}  {'SEVERITY':<8}  MESSAGE"]
    for f in report.findings:
        lines.append(f"{f.check:<{width}}  {_MARK[f.severity.value]:<8}  {f.message}")
        if f.severity.value != "ok" and f.fix:
            lines.append(f"{'':<{width}}  {'':<8}  fix: {f.fix}")
    lines.append(f"\n{report.errors} error(s), {report.warnings} warning(s)")
    return "\n".join(lines)


def scan_lines(result: dict[str, Any]) -> list[str]:
    """A GPU-health scan for a terminal: the summary, then one line per unhealthy node."""
    lines = [f"gpu-health scan: {result.get('outcome')}: {result.get('reason', '')}"]
    for one in result.get("results") or []:
        lines.append(f"  {one.get('node') or '-':<40} {one.get('outcome', ''):<10} {one.get('reason', '')}")
    return lines
