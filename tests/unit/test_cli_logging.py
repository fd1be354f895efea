"""On a terminal, the command line logs only WARNING and above to stderr unless --verbose, so the
drain's progress line is never interleaved with log lines (docs/cli.md)."""

from __future__ import annotations

import logging

import pytest

from gpuwarden.cli import log_level
from gpuwarden.observability import logger


@pytest.mark.parametrize(
    ("on_terminal", "verbose", "level"),
    [(True, False, "WARNING"), (True, True, "INFO"), (False, False, "INFO")],
)
def test_a_terminal_gets_warnings_only_unless_verbose(on_terminal: bool, verbose: bool, level: str) -> None:
    # Given the logger at INFO
    logger.setLevel("INFO")
    try:
        # When the command line sets its level
        log_level(on_terminal=on_terminal, verbose=verbose)
        # Then a terminal gets WARNING and above, unless --verbose; a pipe keeps every line
        assert logging.getLevelName(logger.log_level) == level
    finally:
        logger.setLevel("INFO")
