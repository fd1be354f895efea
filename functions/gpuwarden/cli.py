"""The `gpuwarden` command line (docs/cli.md): the same services, routed as the deployed rules."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import click

from gpuwarden.domain.errors import GpuwardenError, InvalidEvent, InvalidPolicy
from gpuwarden.sources.runbook import RUNBOOK_ACTIONS

if TYPE_CHECKING:
    from gpuwarden.config import Settings
    from gpuwarden.services.context import Deps
    from gpuwarden.services.runbook import DrainProgress
    from gpuwarden.sources import RunbookRequest, WindowTick

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def _fail_invalid(message: str, errors: list[dict[str, Any]] | None = None) -> NoReturn:
    click.echo(f"gpuwarden: invalid input: {message}", err=True)
    for error in errors or []:
        loc = ".".join(str(p) for p in error.get("loc", ()))
        click.echo(f"  - {loc or '(root)'}: {error.get('msg', '')}", err=True)
    sys.exit(EXIT_INVALID)


def _emit(result: dict[str, Any]) -> NoReturn:
    click.echo(json.dumps(result, indent=2, sort_keys=False))
    sys.exit(EXIT_FAILED if result.get("outcome") == "failed" else EXIT_OK)


def run_event(raw: object, deps: Deps | None = None) -> dict[str, Any]:
    """Parse and route one event exactly as deployed, then run it to the end (drain included).
    `deps`: what to run with (default: built from the environment, as `invoke` does;
    `gpuwarden simulate` passes the simulator's).

    Every failure after parsing (no cluster, no credentials, an endpoint down, retries
    exhausted) is the failed JSON result, never an exception."""
    from gpuwarden.config import Settings
    from gpuwarden.services.dispatch import handle_batch
    from gpuwarden.services.failures import failed_result
    from gpuwarden.sources import NoticeBatch, RunbookRequest, WindowTick, parse_event
    from gpuwarden.wiring import build_deps, deployed_rules

    settings = Settings.from_env()
    parsed = parse_event(raw, deployed=deployed_rules(settings))
    if isinstance(parsed, RunbookRequest):  # as a direct invoke of the runbook function would
        try:
            return run_local_runbook(parsed)
        except InvalidPolicy:
            raise
        except GpuwardenError as err:
            failed = failed_result("manual", err, node=parsed.node, instance_id=parsed.instance_id)
            return failed.to_json() | {"action": parsed.action, "dry_run": parsed.dry_run}
    if isinstance(parsed, WindowTick):
        return _run_tick(parsed, settings, deps)
    if not isinstance(parsed, NoticeBatch):
        raise GpuwardenError(f"{type(parsed).__name__} inputs are not handled by this version")
    try:
        deps = deps or build_deps(settings, caller="cli")
    except InvalidPolicy:
        raise
    except GpuwardenError as err:
        first = parsed.notices[0] if parsed.notices else None
        return failed_result(
            parsed.reported_kind.value,
            err,
            event_id=first.event_id if first else parsed.event_id,
            node=first.node_name if first else None,
            instance_id=first.instance_id if first else None,
        ).to_json()
    return handle_batch(parsed, deps, drain_locally=True).to_json()


def _run_tick(tick: WindowTick, settings: Settings, deps: Deps | None = None) -> dict[str, Any]:
    from gpuwarden.services.failures import failed_result
    from gpuwarden.services.windows import handle_window_tick
    from gpuwarden.wiring import build_deps

    try:
        return handle_window_tick(tick, deps or build_deps(settings, caller="cli")).to_json()
    except InvalidPolicy:
        raise
    except GpuwardenError as err:
        return failed_result(tick_kind(tick), err, event_id=tick.execution_id).to_json()


def tick_kind(tick: WindowTick) -> str:
    """The contract kind a Scheduler tick reports as."""
    return {"maintenance-due": "scheduled-maintenance", "capacity-block-due": "capacity-block-plan"}.get(
        tick.action, "budget-window"
    )


def fallback_kind(raw: object) -> str:
    """The contract kind of an input whose handling failed before it was routed."""
    from gpuwarden.sources.routing import KIND_OF

    if isinstance(raw, dict):
        tag = raw.get("detail-type", raw.get("detail_type"))
        if isinstance(tag, str) and tag in KIND_OF:
            return KIND_OF[tag].value
        if "gpuwarden" in raw:
            return "budget-window"
    return "manual"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuwarden")
def main() -> None:
    """gpuwarden: cordon, checkpoint, drain and replace GPU nodes on EKS."""
    # stdout carries only the result: log lines go to stderr, and EMF metrics (meant for a
    # Lambda's CloudWatch log stream) are not printed at all outside Lambda.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    from gpuwarden.observability import logger

    handler = logger.registered_handler
    if isinstance(handler, logging.StreamHandler):
        handler.setStream(sys.stderr)


@main.command()
@click.argument("event", type=click.File("r", encoding="utf-8"))
def invoke(event: TextIO) -> None:
    """Route one EVENT (a JSON file, or - for standard input) as the deployed rules would,
    run it to the end, and print the JSON result.

    Exit 0 for handled / ignored / duplicate / dry-run, 2 for input that does not parse,
    1 for failure. KUBECONFIG, GPUWARDEN_POLICY_FILE, DRY_RUN and GPUWARDEN_NOW apply.
    """
    try:
        raw = json.load(event)
    except ValueError as err:
        _fail_invalid(f"not JSON: {err}")
    try:
        result = run_event(raw)
    except InvalidEvent as err:
        _fail_invalid(str(err), err.errors)
    except InvalidPolicy as err:
        _fail_invalid(str(err))
    except GpuwardenError as err:
        _emit({"outcome": "failed", "kind": fallback_kind(raw), "node": None, "reason": str(err), "actions": []})
    _emit(result)


def run_local_runbook(
    request: RunbookRequest, progress: Callable[[DrainProgress], None] | None = None
) -> dict[str, Any]:
    """A runbook request against KUBECONFIG (or the policy's EKS cluster), with the same services
    as the deployed function; the drain runs here to its end. The caller is the OS user."""
    from gpuwarden.config import Settings
    from gpuwarden.services.runbook import run_runbook
    from gpuwarden.wiring import build_deps, runbook_deps

    deps = runbook_deps(build_deps(Settings.from_env()), request)
    return run_runbook(request, deps, drain_locally=True, progress=progress).to_json()


def _whoami() -> str:
    import getpass

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return str(boto3.client("sts").get_caller_identity()["Arn"])
    except (BotoCoreError, ClientError):
        return f"cli:{getpass.getuser()}"


def run_remote_runbook(function: str, payload: dict[str, Any]) -> dict[str, Any]:
    """`lambda.invoke` (RequestResponse) of the deployed runbook function. Who asked goes in the
    ClientContext (the function records it; CloudTrail has the authoritative principal)."""
    import base64

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    context = base64.b64encode(json.dumps({"custom": {"caller": _whoami()}}).encode()).decode()
    failed: dict[str, Any] = {"outcome": "failed", "kind": "manual", "action": payload["action"], "actions": []}
    try:
        response = boto3.client("lambda").invoke(
            FunctionName=function,
            InvocationType="RequestResponse",
            Payload=json.dumps(payload).encode(),
            ClientContext=context,
        )
        body = json.loads(response["Payload"].read() or b"null")
    except (BotoCoreError, ClientError, ValueError) as err:
        return failed | {"reason": f"invoke of {function} failed: {err}"}
    if response.get("FunctionError"):
        detail = body if isinstance(body, dict) else {}
        why = f"{detail.get('errorType', 'error')}: {detail.get('errorMessage', body)}"
        return failed | {"reason": f"{function} failed: {why}"}
    if isinstance(body, dict) and body.get("outcome") == "invalid":
        _fail_invalid(str(body.get("error")), list(body.get("errors") or []))
    if not isinstance(body, dict):
        return failed | {"reason": f"{function} answered {body!r}, not a runbook result"}
    return body


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


@main.command()
@click.argument("action", type=click.Choice(RUNBOOK_ACTIONS), metavar="ACTION")
@click.option("--node", metavar="NAME", help="The node's name.")
@click.option("--instance-id", metavar="ID", help="The node's EC2 instance id (i-…).")
@click.option("--dry-run", is_flag=True, help="Plan and report every action, change nothing.")
@click.option("--force", is_flag=True, help="Override budget windows and do-not-disrupt (never a PDB).")
@click.option("--reason", default="", metavar="TEXT", help="Why: recorded in the ledger and the node's Events.")
@click.option("--remote", metavar="FUNCTION_NAME", help="Invoke the deployed runbook function instead.")
@click.option("--json", "as_json", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def runbook(
    action: str,
    node: str | None,
    instance_id: str | None,
    dry_run: bool,
    force: bool,
    reason: str,
    remote: str | None,
    as_json: bool,
) -> None:
    """Run one runbook ACTION on one node (--node NAME or --instance-id ID).

    \b
    plan        what a drain would do to every pod now (changes nothing)
    status      taints, cordon, gpuwarden annotations, checkpoint waits, PDB blocks, ledger
    cordon      cordon + taint gpuwarden.io/disruption=manual
    uncordon    undo gpuwarden's taint, cordon and annotations (never someone else's cordon)
    drain       cordon, checkpoint handshake, then evict (PDBs are never overridden)
    checkpoint  ask the opted-in pods to checkpoint, nothing else
    replace     launch the node's replacement capacity, nothing else

    Locally against KUBECONFIG (GPUWARDEN_POLICY_FILE, GPUWARDEN_NOW apply), or --remote
    through the deployed function. Exit 0 for handled / ignored / duplicate / dry-run,
    2 for invalid input (the field is named on stderr), 1 for failure.
    """
    from gpuwarden.sources import parse_runbook

    payload: dict[str, Any] = {"action": action, "dry_run": dry_run, "force": force, "reason": reason}
    payload |= {k: v for k, v in (("node", node), ("instance_id", instance_id)) if v is not None}
    try:
        request = parse_runbook(payload)
    except InvalidEvent as err:
        _fail_invalid(str(err), err.errors)
    progress = ProgressLine(sys.stderr) if sys.stderr.isatty() and not remote else None
    try:
        result = run_remote_runbook(remote, payload) if remote else run_local_runbook(request, progress)
    except InvalidPolicy as err:
        _fail_invalid(str(err))
    except GpuwardenError as err:
        from gpuwarden.services.failures import failed_result

        failed = failed_result("manual", err, node=node, instance_id=instance_id).to_json()
        result = failed | {"action": action, "dry_run": dry_run}
    finally:
        if progress is not None:
            progress.finish()
    if as_json or not sys.stdout.isatty():
        _emit(result)
    click.echo("\n".join(human_lines(result)))
    sys.exit(EXIT_FAILED if result.get("outcome") == "failed" else EXIT_OK)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def doctor(as_json: bool) -> None:
    """Check the cluster (KUBECONFIG), the policy and the AWS account against what gpuwarden
    needs and what would fight it (Karpenter's interruption queue, aws-node-termination-handler,
    short NodePool terminationGracePeriods, ...). Reads only. Exit 1 when a finding is an error."""
    from gpuwarden.services.doctor import render_table
    from gpuwarden.wiring import doctor_report

    report = doctor_report()
    if as_json or not sys.stdout.isatty():
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(render_table(report))
    sys.exit(EXIT_FAILED if report.errors else EXIT_OK)


@main.command()
@click.option("--speed", default=10.0, show_default=True, help="How much faster the simulated kubelet's clock runs.")
def demo(speed: float) -> None:
    """Replay sample events through the real handlers on a simulated GPU cluster and AWS."""
    from gpuwarden.checkout import simulator

    sys.exit(simulator("sim.demo").run_demo(speed=speed))


main.add_command(__import__("gpuwarden.cli_simulate", fromlist=["simulate"]).simulate)

if __name__ == "__main__":
    main()
