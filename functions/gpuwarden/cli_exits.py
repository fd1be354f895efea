"""How every command answers and exits (docs/cli.md#exit-codes): 0 done, 1 failed, 2 refused before
any work, 3 refused by a protection, 4 a drain its deadline overtook, 130 interrupted. The one
error-to-answer path of the command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from gpuwarden.domain.actions import ActionType, DrainOutcome
from gpuwarden.domain.errors import GpuwardenError, InvalidEvent, InvalidPolicy

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
#: the action was refused by a protection (a window, a NodePool's budgets, do-not-disrupt): nothing
#: was disrupted; `--force` overrides (never a PDB)
EXIT_REFUSED = 3
#: a drain did not finish before its deadline: a pod was still on the node (`drain.outcome`
#: deadline-passed)
EXIT_NOT_DRAINED = 4
#: Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130


def _answers(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer and every answer it sums (a batch's notices, a scan's nodes)."""
    return [result, *(one for child in result.get("results") or () for one in _answers(child))]


def exit_code(result: dict[str, Any], *, refusal: int = EXIT_OK) -> int:
    """What happened, as a script reads it (docs/cli.md#exit-codes), from the answer's types: its
    `outcome`, `drain.outcome` (`DrainOutcome`) and `actions[].type` (`ActionType`), never its words.
    A failure anywhere first, then a drain its deadline overtook, then a refusal of the whole answer,
    which exits `refusal`: the command decides it (`runbook`: EXIT_REFUSED, one person asked for this
    action; an event's `ignored` stays 0, not this cluster's business or already handled)."""
    answers = _answers(result)
    if any(one.get("outcome") == "failed" for one in answers):
        return EXIT_FAILED
    if any((one.get("drain") or {}).get("outcome") == DrainOutcome.DEADLINE_PASSED for one in answers):
        return EXIT_NOT_DRAINED
    refused = any(a.get("type") == ActionType.REFUSED for a in result.get("actions") or ())
    if result.get("outcome") == "ignored" and refused:
        return refusal
    return EXIT_OK


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


def answer(
    result: dict[str, Any], as_json: bool, prose: Callable[[dict[str, Any]], list[str]], *, refusal: int = EXIT_OK
) -> NoReturn:
    """JSON when asked or piped; prose at a terminal. The exit code is the same either way
    (`refusal`: what a refusal of the whole answer exits, as `exit_code` says)."""
    if as_json or not sys.stdout.isatty():
        click.echo(json.dumps(result, indent=2, sort_keys=False))
    else:
        click.echo("\n".join(prose(result)))
    sys.exit(exit_code(result, refusal=refusal))


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


def interrupted(node: str | None, instance_id: str | None, go_on: str) -> NoReturn:
    """Ctrl-C during a run: what state the node is in now (read with `runbook status`, which changes
    nothing), the one command that goes on and the one that gives the node back; exit 130."""
    from gpuwarden.terminal import interrupted_lines

    status: dict[str, Any] | None = None
    if node or instance_id:
        try:
            from gpuwarden.local import run_runbook
            from gpuwarden.sources import parse_runbook

            asked = {"action": "status"} | ({"node": node} if node else {"instance_id": instance_id})
            status = run_runbook(parse_runbook(asked))
        except (GpuwardenError, KeyboardInterrupt):
            status = None
    click.echo("\n".join(interrupted_lines(node or instance_id, status, go_on)), err=True)
    sys.exit(EXIT_INTERRUPTED)
