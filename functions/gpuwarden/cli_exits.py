"""How every command answers and exits (docs/cli.md#exit-codes): 0 done, 1 failed, 2 refused before
any work. The one error-to-answer path of the command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from gpuwarden.domain.errors import GpuwardenError, InvalidEvent, InvalidPolicy

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def fail_invalid(message: str, errors: list[dict[str, Any]] | None = None) -> NoReturn:
    """Input that does not parse: what it is and each field that is wrong, once, on stderr; exit 2."""
    from gpuwarden.terminal import invalid_input_lines

    click.echo("\n".join(invalid_input_lines(message, errors)), err=True)
    sys.exit(EXIT_INVALID)


def fail_config(err: InvalidPolicy, kind: str, asked: dict[str, Any] | None = None) -> NoReturn:
    """A setting or policy gpuwarden does not understand: said once on stderr (and the failed JSON to a
    script), exit 2 (docs/cli.md#exit-codes)."""
    from gpuwarden.terminal import config_error_lines, refused_result

    click.echo("\n".join(config_error_lines(err)), err=True)
    if not sys.stdout.isatty():
        click.echo(json.dumps(refused_result(err, kind, asked or {}), indent=2))
    sys.exit(EXIT_INVALID)


def emit(result: dict[str, Any]) -> NoReturn:
    click.echo(json.dumps(result, indent=2, sort_keys=False))
    sys.exit(EXIT_FAILED if result.get("outcome") == "failed" else EXIT_OK)


def answer(result: dict[str, Any], as_json: bool, prose: Callable[[dict[str, Any]], list[str]]) -> NoReturn:
    """JSON when asked or piped; prose at a terminal. The exit code is the same either way."""
    if as_json or not sys.stdout.isatty():
        emit(result)
    click.echo("\n".join(prose(result)))
    sys.exit(EXIT_FAILED if result.get("outcome") == "failed" else EXIT_OK)


def guarded(run: Callable[[], dict[str, Any]], kind: str, asked: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one error-to-answer path of every command: input or a policy that does not validate is
    exit 2 with the field named; any other failure is the failed JSON result, never a traceback."""
    try:
        return run()
    except InvalidEvent as err:
        fail_invalid(str(err), err.errors)
    except InvalidPolicy as err:
        fail_config(err, kind, asked)
    except GpuwardenError as err:
        from gpuwarden.services.engine.failures import failed_result

        asked = asked or {}
        failed = failed_result(kind, err, node=asked.get("node"), instance_id=asked.get("instance_id")).to_json()
        return failed | ({"action": asked["action"], "dry_run": asked["dry_run"]} if "action" in asked else {})


def refuse(lines: list[str]) -> NoReturn:
    """An argument that does not validate: said once on stderr, exit 2, before any work."""
    click.echo("\n".join(lines), err=True)
    sys.exit(EXIT_INVALID)
