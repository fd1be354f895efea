"""The `gpuwarden` command line (docs/cli.md): the same services, routed as the deployed rules."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

import click

from gpuwarden.cli_exits import EXIT_REFUSED, answer, fail_config, fail_invalid, guarded, interrupted
from gpuwarden.domain.errors import InvalidEvent, InvalidSetting
from gpuwarden.sources.runbook import RUNBOOK_ACTIONS

if TYPE_CHECKING:
    from gpuwarden.sources import RunbookRequest
    from gpuwarden.terminal import ProgressLine


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
    if sys.stderr.isatty() and not verbose:
        from gpuwarden.terminal import log_for_a_person

        log_for_a_person(handler, answer_on_terminal=sys.stdout.isatty())


def log_level(*, on_terminal: bool, verbose: bool) -> None:
    """On a terminal, WARNING and above unless --verbose: the progress line is never interleaved."""
    from gpuwarden.observability import logger

    if on_terminal and not verbose:
        logger.setLevel("WARNING")


@main.command(short_help="Route one event as the deployed rules would, run it to the end, print the JSON result.")
@click.argument("event", type=click.File("r", encoding="utf-8"))
@click.option("--dry-run", is_flag=True, help="Plan and report every action, change nothing (as DRY_RUN=true).")
@click.option("--json", "as_json", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def invoke(event: TextIO, dry_run: bool, as_json: bool) -> None:
    """Route one EVENT (a JSON file, or - for standard input) as the deployed rules would,
    run it to the end, and print the result: a timeline at a terminal, the JSON result when
    piped or with --json. Exit 0 done, 1 failed, 2 input that does not parse, 3 refused by a
    protection, 4 a drain its deadline overtook, 130 Ctrl-C (docs/cli.md#exit-codes).
    KUBECONFIG, GPUWARDEN_POLICY_FILE, DRY_RUN and GPUWARDEN_NOW apply."""
    try:
        raw = json.load(event)
    except ValueError as err:
        fail_invalid(f"not JSON: {err}")
    from gpuwarden.local import run_event, target_of
    from gpuwarden.services.dispatch import fallback_kind
    from gpuwarden.terminal import timeline_lines

    try:
        result = guarded(lambda: run_event(raw, dry_run=dry_run), fallback_kind(raw))
    except KeyboardInterrupt:
        again = f"gpuwarden invoke {event.name}" if event.name != "<stdin>" else "gpuwarden invoke - < EVENT.json"
        interrupted(*target_of(raw), go_on=f"{again} (the same event goes on from the node's marks)")
    answer(result, as_json, timeline_lines)


@main.command(short_help="One on-call action on one node: plan, status, cordon, uncordon, drain, checkpoint, replace.")
@click.argument("action", type=click.Choice(RUNBOOK_ACTIONS), metavar="ACTION")
@click.option("--node", metavar="NAME", help="The node's name.")
@click.option("--instance-id", metavar="ID", help="The node's EC2 instance id (i-…).")
@click.option("--dry-run", is_flag=True, help="Plan and report every action, change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Override budget windows, the NodePool's disruption budgets and do-not-disrupt (never a PDB).",
)
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
    through the deployed function. Exit 0 done, 1 failed, 2 invalid input (the field is named
    on stderr), 3 refused by a protection (a window, the NodePool's budgets, do-not-disrupt:
    --force overrides), 4 a drain its deadline overtook, 130 Ctrl-C (docs/cli.md#exit-codes).
    """
    from gpuwarden.sources import parse_runbook

    payload: dict[str, Any] = {"action": action, "dry_run": dry_run, "force": force, "reason": reason}
    payload |= {k: v for k, v in (("node", node), ("instance_id", instance_id)) if v is not None}
    try:
        request = parse_runbook(payload)
    except InvalidEvent as err:
        fail_invalid(str(err), err.errors)
    from gpuwarden.terminal import ProgressLine, human_lines

    progress = ProgressLine(sys.stderr) if sys.stderr.isatty() and not remote else None
    try:
        result = guarded(lambda: _runbook(request, payload, remote, progress), "manual", payload)
    except KeyboardInterrupt:
        if progress is not None:
            progress.finish()
        if remote:  # the deployed function goes on: its drain workflow carries the drain
            raise
        again = f"gpuwarden runbook {action} " + (f"--node {node}" if node else f"--instance-id {instance_id}")
        interrupted(node, instance_id, again)
    finally:
        if progress is not None:
            progress.finish()
    answer(result, as_json, human_lines, refusal=EXIT_REFUSED)


@main.command(short_help="Check the cluster, the policy and AWS against what gpuwarden needs and what fights it.")
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
        fail_config(err, "manual")
    if as_json or not sys.stdout.isatty():
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(doctor_table(report))
    sys.exit(1 if report.errors else 0)


@main.command(short_help="One GPU-health scan, as the deployed schedule runs it every minute.")
@click.option("--json", "as_json", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def scan(as_json: bool) -> None:
    """One GPU-health scan, as the deployed schedule runs it every minute: every GPU node whose
    AcceleratedHardwareReady or GPUHealthy condition is False is handled as gpu-unhealthy.
    Exit as for invoke. KUBECONFIG, GPUWARDEN_POLICY_FILE and DRY_RUN apply."""
    from gpuwarden.kinds.registry import SCAN_KIND
    from gpuwarden.local import run_scan
    from gpuwarden.terminal import scan_lines

    result = guarded(run_scan, SCAN_KIND.value)
    answer(result, as_json, scan_lines)


@main.command(short_help="Take back every mark gpuwarden left on nodes, pods and NodePools (the way back).")
@click.option("--all", "every", is_flag=True, help="Every node of the cluster, and every NodePool the windows changed.")
@click.option("--node", metavar="NAME", help="One node.")
@click.option("--dry-run", is_flag=True, help="Say what would be taken back, change nothing.")
@click.option("--json", "as_json", is_flag=True, help="JSON output (the default when stdout is not a terminal).")
def release(every: bool, node: str | None, dry_run: bool, as_json: bool) -> None:
    """Take back every mark gpuwarden left (docs/rollback.md): its cordons, taints and annotations on
    nodes, the do-not-disrupt marks it added to pods, and (--all) NodePool budgets and GPU limits
    restored exactly. Idempotent; a timeline at a terminal, the JSON answer when piped or with
    --json. Exit as for invoke."""
    from gpuwarden.local import run_release
    from gpuwarden.terminal import timeline_lines

    if every == (node is not None):
        fail_invalid("give exactly one of --all and --node NAME")
    answer(guarded(lambda: run_release(node, dry_run=dry_run), "manual", {"node": node}), as_json, timeline_lines)


DEMO_SPEED, SANDBOX_SPEED = 10.0, 1.0  # the sandbox keeps real time: commands typed by hand meet real waits


@main.command(short_help="The tour on a simulated GPU cluster and AWS; --serve keeps a sandbox up.")
@click.option(
    "--speed",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help=f"How many times faster than real time the simulated cluster's clock runs "
    f"[default: {DEMO_SPEED:g} for the tour, {SANDBOX_SPEED:g} (real time) with --serve].",
)
@click.option("--serve", is_flag=True, help="Keep the demo's cluster and moto up for commands by hand (Ctrl-C stops).")
@click.option(
    "--real",
    is_flag=True,
    help="On a real control plane with real Karpenter (KWOK nodes), built by `make setup-real` (docs/realplane.md).",
)
@click.option("--seeds", is_flag=True, help="With --serve: the seed articles' manifests (docs/protections.md).")
def demo(speed: float | None, serve: bool, real: bool, seeds: bool) -> None:
    """Replay sample events through the real handlers on a simulated GPU cluster and AWS;
    with --serve, print the `export` lines of a sandbox and keep it up until Ctrl-C; with --real,
    on a real control plane (etcd, kube-apiserver, controller-manager, scheduler, KWOK, Karpenter)."""
    from gpuwarden.checkout import simulator

    if seeds and (real or not serve):
        raise click.UsageError("--seeds is a sandbox of the simulator: use it with --serve, without --real")
    if real:
        if speed is not None:
            raise click.UsageError("--speed is the simulator's clock: the real plane runs in real time")
        harness = simulator("realplane.plane.harness")
        try:
            module = simulator("realplane.demo.sandbox" if serve else "realplane.demo.tour")
            sys.exit(module.serve() if serve else module.run_tour())
        except harness.PlaneError as err:
            raise click.ClickException(str(err)) from None
    if serve:
        sys.exit(simulator("sim.serve").serve(speed=SANDBOX_SPEED if speed is None else speed, seeds=seeds))
    sys.exit(simulator("sim.demo").run_demo(speed=DEMO_SPEED if speed is None else speed))


main.add_command(__import__("gpuwarden.cli_simulate", fromlist=["simulate"]).simulate)

if __name__ == "__main__":
    main()
