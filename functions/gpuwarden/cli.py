"""The `gpuwarden` command line (docs/cli.md): the same services, routed as the deployed rules."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import click

from gpuwarden.domain.errors import GpuwardenError, InvalidEvent, InvalidPolicy, InvalidSetting
from gpuwarden.sources.runbook import RUNBOOK_ACTIONS

if TYPE_CHECKING:
    from gpuwarden.sources import RunbookRequest
    from gpuwarden.terminal import ProgressLine

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def _fail_invalid(message: str, errors: list[dict[str, Any]] | None = None) -> NoReturn:
    click.echo(f"gpuwarden: invalid input: {message}", err=True)
    for error in errors or []:
        loc = ".".join(str(p) for p in error.get("loc", ()))
        click.echo(f"  - {loc or '(root)'}: {error.get('msg', '')}", err=True)
    sys.exit(EXIT_INVALID)


def _fail_config(err: InvalidPolicy, kind: str, asked: dict[str, Any] | None = None) -> NoReturn:
    """A setting or policy gpuwarden does not understand: it refuses to run. Exit 2, the reason
    (naming the variable or file) on stderr and as the failed JSON result on stdout."""
    from gpuwarden.services.engine.failures import failed_result

    asked = asked or {}
    click.echo(f"gpuwarden: invalid configuration: {err}", err=True)
    failed = failed_result(kind, err, node=asked.get("node"), instance_id=asked.get("instance_id")).to_json()
    click.echo(json.dumps(failed, indent=2))
    sys.exit(EXIT_INVALID)


def _emit(result: dict[str, Any]) -> NoReturn:
    click.echo(json.dumps(result, indent=2, sort_keys=False))
    sys.exit(EXIT_FAILED if result.get("outcome") == "failed" else EXIT_OK)


def _guarded(run: Callable[[], dict[str, Any]], kind: str, asked: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one error-to-answer path of every command: input or a policy that does not validate is
    exit 2 with the field named; any other failure is the failed JSON result, never a traceback."""
    try:
        return run()
    except InvalidEvent as err:
        _fail_invalid(str(err), err.errors)
    except InvalidPolicy as err:
        _fail_config(err, kind, asked)
    except GpuwardenError as err:
        from gpuwarden.services.engine.failures import failed_result

        asked = asked or {}
        failed = failed_result(kind, err, node=asked.get("node"), instance_id=asked.get("instance_id")).to_json()
        return failed | ({"action": asked["action"], "dry_run": asked["dry_run"]} if "action" in asked else {})


def _runbook(
    request: RunbookRequest, payload: dict[str, Any], remote: str | None, progress: ProgressLine | None
) -> dict[str, Any]:
    if remote:
        from gpuwarden.adapters.remote_runbook import invoke_runbook

        return invoke_runbook(remote, payload)
    from gpuwarden.local import run_runbook

    return run_runbook(request, progress)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuwarden")
@click.option("--verbose", "-v", is_flag=True, help="Every log line on stderr (on a terminal: WARNING and above only).")
def main(verbose: bool) -> None:
    """gpuwarden: cordon, checkpoint, drain and replace GPU nodes on EKS."""
    # stdout carries only the result: log lines go to stderr, and EMF metrics (meant for a
    # Lambda's CloudWatch log stream) are not printed at all outside Lambda.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    from gpuwarden.observability import logger

    handler = logger.registered_handler
    if isinstance(handler, logging.StreamHandler):
        handler.setStream(sys.stderr)
    log_level(on_terminal=sys.stderr.isatty(), verbose=verbose)


def log_level(*, on_terminal: bool, verbose: bool) -> None:
    """On a terminal, WARNING and above unless --verbose: the progress line is never interleaved."""
    from gpuwarden.observability import logger

    if on_terminal and not verbose:
        logger.setLevel("WARNING")


@main.command()
@click.argument("event", type=click.File("r", encoding="utf-8"))
@click.option("--dry-run", is_flag=True, help="Plan and report every action, change nothing (as DRY_RUN=true).")
def invoke(event: TextIO, dry_run: bool) -> None:
    """Route one EVENT (a JSON file, or - for standard input) as the deployed rules would,
    run it to the end, and print the JSON result.

    Exit 0 for handled / ignored / duplicate / dry-run, 2 for input that does not parse,
    1 for failure. KUBECONFIG, GPUWARDEN_POLICY_FILE, DRY_RUN and GPUWARDEN_NOW apply.
    """
    try:
        raw = json.load(event)
    except ValueError as err:
        _fail_invalid(f"not JSON: {err}")
    from gpuwarden.local import run_event
    from gpuwarden.services.dispatch import fallback_kind

    _emit(_guarded(lambda: run_event(raw, dry_run=dry_run), fallback_kind(raw)))


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
    from gpuwarden.terminal import ProgressLine, human_lines

    progress = ProgressLine(sys.stderr) if sys.stderr.isatty() and not remote else None
    try:
        result = _guarded(lambda: _runbook(request, payload, remote, progress), "manual", payload)
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
    from gpuwarden.terminal import doctor_table
    from gpuwarden.wiring import doctor_report

    try:
        report = doctor_report()
    except InvalidSetting as err:
        _fail_config(err, "manual")
    if as_json or not sys.stdout.isatty():
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(doctor_table(report))
    sys.exit(EXIT_FAILED if report.errors else EXIT_OK)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def scan(as_json: bool) -> None:
    """One GPU-health scan, as the deployed schedule runs it every minute: every GPU node whose
    AcceleratedHardwareReady or GPUHealthy condition is False is handled as gpu-unhealthy.
    Exit as for invoke. KUBECONFIG, GPUWARDEN_POLICY_FILE and DRY_RUN apply."""
    from gpuwarden.kinds.registry import SCAN_KIND
    from gpuwarden.local import run_scan
    from gpuwarden.terminal import scan_lines

    result = _guarded(run_scan, SCAN_KIND.value)
    if as_json or not sys.stdout.isatty():
        _emit(result)
    click.echo("\n".join(scan_lines(result)))
    sys.exit(EXIT_FAILED if result.get("outcome") == "failed" else EXIT_OK)


@main.command()
@click.option("--all", "every", is_flag=True, help="Every node of the cluster, and every NodePool the windows changed.")
@click.option("--node", metavar="NAME", help="One node.")
@click.option("--dry-run", is_flag=True, help="Say what would be taken back, change nothing.")
def release(every: bool, node: str | None, dry_run: bool) -> None:
    """Take back every mark gpuwarden left (docs/rollback.md): its cordons, taints and annotations on
    nodes, the do-not-disrupt marks it added to pods, and (--all) NodePool budgets and GPU limits
    restored exactly. Idempotent; prints the JSON answer. Exit as for invoke."""
    from gpuwarden.local import run_release

    if every == (node is not None):
        _fail_invalid("give exactly one of --all and --node NAME")
    _emit(_guarded(lambda: run_release(node, dry_run=dry_run), "manual", {"node": node}))


@main.command()
@click.option("--speed", default=10.0, show_default=True, help="How much faster the simulated kubelet's clock runs.")
@click.option("--serve", is_flag=True, help="Keep the demo's cluster and moto up for commands by hand (Ctrl-C stops).")
def demo(speed: float, serve: bool) -> None:
    """Replay sample events through the real handlers on a simulated GPU cluster and AWS;
    with --serve, print the `export` lines of a sandbox and keep it up until Ctrl-C."""
    from gpuwarden.checkout import simulator

    if serve:
        sys.exit(simulator("sim.serve").serve(speed=1.0 if speed == 10.0 else speed))
    sys.exit(simulator("sim.demo").run_demo(speed=speed))


main.add_command(__import__("gpuwarden.cli_simulate", fromlist=["simulate"]).simulate)

if __name__ == "__main__":
    main()
