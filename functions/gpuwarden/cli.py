"""The `gpuwarden` command line (CONTRACT §5): the same services, routed as the deployed rules."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn, TextIO

import click

from gpuwarden.domain.errors import GpuwardenError, InvalidEvent, InvalidPolicy

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


def run_event(raw: object) -> dict[str, Any]:
    """Parse and route one event exactly as deployed, then run it to the end (drain included)."""
    from gpuwarden.config import Settings
    from gpuwarden.services.dispatch import handle_batch
    from gpuwarden.sources import NoticeBatch, WindowTick, parse_event
    from gpuwarden.wiring import build_deps

    parsed = parse_event(raw)
    if isinstance(parsed, WindowTick):
        from gpuwarden.services.windows import handle_window_tick

        return handle_window_tick(parsed, build_deps(Settings.from_env(), caller="cli")).to_json()
    if not isinstance(parsed, NoticeBatch):
        raise GpuwardenError(f"{type(parsed).__name__} inputs are not handled by this version")
    deps = build_deps(Settings.from_env(), caller="cli")
    return handle_batch(parsed, deps, drain_locally=True).to_json()

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuwarden")
def main() -> None:
    """gpuwarden: cordon, checkpoint, drain and replace GPU nodes on EKS."""
    from gpuwarden.observability import logger

    logger.registered_handler.setStream(sys.stderr)  # stdout carries only the JSON result


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
        _emit({"outcome": "failed", "kind": "unknown", "reason": str(err), "actions": []})
    _emit(result)


@main.command()
@click.option("--speed", default=10.0, show_default=True, help="How much faster the simulated kubelet's clock runs.")
def demo(speed: float) -> None:
    """Replay sample events through the real handlers on a simulated GPU cluster and AWS."""
    try:
        from sim.demo import run_demo
    except ImportError as err:  # the simulator ships with the source tree, not the Lambda asset
        raise click.ClickException(f"the demo needs the source checkout (sim/): {err}") from err
    sys.exit(run_demo(speed=speed))


if __name__ == "__main__":
    main()
