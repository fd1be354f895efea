"""The exit code is read from the answer's types; whether a refusal is exit 3 is the command's
(docs/cli.md#exit-codes): a runbook action refused by a protection is 3, an event refused the same
way stays 0."""

from __future__ import annotations

from typing import Any

from gpuwarden.cli_exits import EXIT_FAILED, EXIT_NOT_DRAINED, EXIT_OK, EXIT_REFUSED, exit_code

REFUSED: dict[str, Any] = {"outcome": "ignored", "actions": [{"type": "refused", "target": "node/n"}]}


def test_a_refusal_exits_what_the_command_says() -> None:
    assert exit_code(REFUSED) == EXIT_OK
    assert exit_code(REFUSED, refusal=EXIT_REFUSED) == EXIT_REFUSED
    # the same answer carrying an `action` key is not a runbook answer by that key alone
    assert exit_code(REFUSED | {"action": "drain"}) == EXIT_OK


def test_an_ignored_answer_with_no_refusal_is_done_whatever_the_command() -> None:
    assert exit_code({"outcome": "ignored", "actions": []}, refusal=EXIT_REFUSED) == EXIT_OK


def test_a_failure_anywhere_then_a_deadline_come_before_a_refusal() -> None:
    failed_child = REFUSED | {"results": [{"outcome": "failed"}]}
    assert exit_code(failed_child, refusal=EXIT_REFUSED) == EXIT_FAILED
    late = REFUSED | {"results": [{"outcome": "handled", "drain": {"outcome": "deadline-passed"}}]}
    assert exit_code(late, refusal=EXIT_REFUSED) == EXIT_NOT_DRAINED
