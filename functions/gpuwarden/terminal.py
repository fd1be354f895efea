"""What a person at a terminal reads (docs/cli.md): the drain's progress line, the runbook's answer
as text, doctor's table. The JSON answers are the same documents, printed as they are."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from gpuwarden.domain.wording import count

if TYPE_CHECKING:
    from gpuwarden.domain.errors import InvalidPolicy
    from gpuwarden.services.doctor.doctor import DoctorReport
    from gpuwarden.services.runbook.actions import DrainProgress


def invalid_input_lines(message: str, errors: list[dict[str, Any]] | None) -> list[str]:
    """Input that does not parse: the message (which names a single error), or its head and one
    line per field."""
    if not errors or len(errors) < 2:
        return [f"gpuwarden: invalid input: {message}"]
    lines = [f"gpuwarden: invalid input: {message.split(': ', 1)[0]}:"]
    return lines + [f"  {'.'.join(str(p) for p in e.get('loc', ())) or '(root)'}: {e.get('msg', '')}" for e in errors]


def refused_result(err: InvalidPolicy, kind: str, asked: dict[str, Any]) -> dict[str, Any]:
    """The failed JSON result of a run refused for its configuration (what `failed_result` answers,
    without logging or counting a handling that never started)."""
    from gpuwarden.services.engine.failures import what_failed
    from gpuwarden.services.engine.result import Result

    node, instance = asked.get("node"), asked.get("instance_id")
    return Result(
        outcome="failed", kind=kind, node=node, instance_id=instance, reason=f"{what_failed(err)}: {err}"
    ).to_json()


def config_error_lines(err: InvalidPolicy) -> list[str]:
    """A setting or policy gpuwarden refuses to run with: where it is, then one line per problem
    (the key's path, what was given, what is allowed, "did you mean")."""
    if err.problems and err.source:
        return [f"gpuwarden: invalid configuration: {err.source}:", *(f"  {p}" for p in err.problems)]
    return [f"gpuwarden: invalid configuration: {err}"]


_RECORD_FIELDS = {*vars(logging.makeLogRecord({})), "message", "asctime"}


class TerminalLogFormatter(logging.Formatter):
    """A log line for a person: `gpuwarden: warning: event not posted (reason: …, error: …)`,
    where Lambda's log stream gets Powertools' JSON."""

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and v is not None}
        details = ", ".join(f"{k}: {v}" for k, v in extra.items())
        text = f"gpuwarden: {record.levelname.lower()}: {record.getMessage()}"
        return f"{text} ({details})" if details else text


def log_for_a_person(handler: logging.Handler, *, answer_on_terminal: bool) -> None:
    """Log lines as prose; when the answer itself is printed on the terminal, without the line of a
    failure it already states."""
    handler.setFormatter(TerminalLogFormatter())
    if answer_on_terminal:
        handler.addFilter(AnsweredFailures())


class AnsweredFailures(logging.Filter):
    """Drops the log line of a failed handling (`services.engine.failures`) when the answer printed
    on the terminal says the same, so a failure is read once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.module != "failures"


class ProgressLine:
    """`draining ip-…: 12 left, 3 blocked by PDB serving/inference, 2 waiting on a checkpoint, 1 on
    its gang, 1 in its grace period, 1 waiting its turn, 41 s`, updated in place. Each count is the
    drain's own: a pod waits on a checkpoint only when it opted in and was asked (docs/cli.md)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.open = False

    def __call__(self, progress: DrainProgress) -> None:
        parts = [f"draining {progress.node}: {progress.remaining} left"]
        parts += [f"{count} blocked by PDB {pdb}" for pdb, count in sorted(progress.blocked.items())]
        if progress.checkpoint:
            parts.append(f"{progress.checkpoint} waiting on a checkpoint")
        if progress.gang:
            parts.append(f"{progress.gang} waiting on their gang's checkpoint")
        if progress.grace:
            parts.append(f"{progress.grace} in their grace period")
        if progress.turn:
            parts.append(f"{progress.turn} waiting their turn (lower priority first)")
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
    lines = [f"{'POD':<{width}}  {'STEP':<7}  REASON"]
    lines += [f"{row['pod']:<{width}}  {row['step']:<7}  {row['reason']}" for row in plan]
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
        lines += ["", "would do (dry run):" if result.get("dry_run") else "actions:", *timeline(shown)]
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
    lines.append(f"\n{count(report.errors, 'error')}, {count(report.warnings, 'warning')}")
    return "\n".join(lines)


def scan_lines(result: dict[str, Any]) -> list[str]:
    """A GPU-health scan for a terminal: the summary, then one line per unhealthy node."""
    lines = [f"gpu-health scan: {result.get('outcome')}: {result.get('reason', '')}"]
    for one in result.get("results") or []:
        kind = one.get("kind", "")
        lines.append(f"  {one.get('node') or '-':<40} {kind:<21} {one.get('outcome', ''):<10} {one.get('reason', '')}")
    return lines


def interrupted_lines(target: str | None, status: dict[str, Any] | None, go_on: str) -> list[str]:
    """Ctrl-C: the node's state as `runbook status` read it (cordon, taints, gpuwarden's marks), the
    command that goes on and the one that releases it (docs/cli.md#interrupted)."""
    if target is None:
        return ["gpuwarden: interrupted before any node was named: nothing was changed"]
    found = (status or {}).get("status")
    if found is None:
        why = (status or {}).get("reason") or "not read"
        flag = "--instance-id" if target.startswith("i-") else "--node"
        lines = [f"gpuwarden: interrupted: the state of {target} is not known ({why})"]
        lines.append(f"  to see it: gpuwarden runbook status {flag} {target}")
        if flag == "--instance-id":
            return [*lines, f"  to go on: {go_on}"]
    else:
        node = status.get("node") if status else target
        taints = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in found["taints"]) or "none"
        marks = ", ".join(found.get("annotations") or {}) or "none"
        by = " (by gpuwarden)" if found["cordoned_by_gpuwarden"] else ""
        lines = [
            f"gpuwarden: interrupted: {node} is {'cordoned' + by if found['unschedulable'] else 'schedulable'}",
            f"  taints: {taints}",
            f"  gpuwarden marks: {marks}",
        ]
        target = str(node)
    return [*lines, f"  to go on: {go_on}", f"  to give the node back: gpuwarden release --node {target}"]


#: How the timeline names an action (the demo's and the command line's); other types by their name
TIMELINE_LABELS = {
    "cordon": "cordoned",
    "checkpoint-requested": "asked",
    "signal": "signalled",
    "checkpoint-delivered": "delivered",
    "checkpoint-ack": "ack",
    "evict": "evicted",
    "delete": "deleted",
    "eviction-blocked": "PDB 429",
    "replacement": "replacement",
    "replacement-skipped": "no replacement",
    "drain-complete": "drained",
    "drain-blocked": "BLOCKED",
}


def timeline_line(action: dict[str, Any], start: datetime | None) -> str:
    """One action at its offset from ``start``: `+  3.20s  evicted  ml/train-0  …` (no offset for
    an action without its time, or without a ``start``)."""
    from dateutil.parser import isoparse

    at = f"+{(isoparse(action['at']) - start).total_seconds():6.2f}s" if start and action.get("at") else " " * 8
    what = action.get("pod") or action.get("target") or action.get("taint") or ""
    why = action.get("reason") or action.get("result") or ""
    if action["type"] == "drain-complete" and "seconds_left" in action:
        why = f"{action['seconds_left']:.1f} s of the notice left"
    return f"  {at}  {TIMELINE_LABELS.get(action['type'], action['type']):<13} {what:<34} {why}".rstrip()


def timeline(actions: list[dict[str, Any]]) -> list[str]:
    """The actions as the demo prints them, each at its offset from the first one's time."""
    from dateutil.parser import isoparse

    times = [isoparse(a["at"]) for a in actions if a.get("at")]
    start = min(times) if times else None
    return [timeline_line(a, start) for a in actions]


def timeline_lines(result: dict[str, Any]) -> list[str]:
    """`invoke` and `release` at a terminal: the outcome and why, how the drain ended, the timeline."""
    where = result.get("node") or result.get("instance_id") or "-"
    lines = [f"{result.get('kind', '?')} {where}: {result['outcome']}", f"  {result.get('reason', '')}"]
    drain = result.get("drain") or {}
    if drain.get("outcome"):
        lines.append(f"  drain: {drain['outcome']}")
    shown = timeline(result.get("actions") or [])
    return [*lines, *(["", *shown] if shown else [])]
