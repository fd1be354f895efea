"""What `--help` promises is what runs: the top-level list of commands is not cut off, and `demo`'s
documented `--speed` defaults are its real ones (10 for the tour, real time with --serve, an explicit
value honoured in both)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from gpuwarden import cli


def test_the_top_level_help_cuts_no_description_off() -> None:
    result = CliRunner().invoke(cli.main, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    commands = result.output.split("Commands:", 1)[1]
    assert "..." not in commands
    for name, command in cli.main.commands.items():
        assert command.short_help, name
        assert " ".join(command.short_help.split()[-3:]) in " ".join(commands.split()), name


class Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def __call__(self, module: str) -> Any:
        recorded = self

        class Module:
            @staticmethod
            def serve(speed: float, seeds: bool = False) -> int:
                recorded.calls.append(("serve --seeds" if seeds else "serve", speed))
                return 0

            @staticmethod
            def run_demo(speed: float) -> int:
                recorded.calls.append(("demo", speed))
                return 0

        return Module


@pytest.mark.parametrize(
    ("args", "called"),
    [
        ([], ("demo", 10.0)),
        (["--serve"], ("serve", 1.0)),
        (["--serve", "--speed", "10"], ("serve", 10.0)),
        (["--serve", "--seeds"], ("serve --seeds", 1.0)),
        (["--speed", "2.5"], ("demo", 2.5)),
    ],
)
def test_demo_runs_at_the_speed_its_help_documents(
    monkeypatch: pytest.MonkeyPatch, args: list[str], called: tuple[str, float]
) -> None:
    recorded = Recorded()
    monkeypatch.setattr("gpuwarden.checkout.simulator", recorded)
    result = CliRunner().invoke(cli.main, ["demo", *args])
    assert result.exit_code == 0, result.output
    assert recorded.calls == [called]


def test_demo_help_shows_both_defaults_and_refuses_a_speed_of_zero() -> None:
    shown = " ".join(CliRunner().invoke(cli.main, ["demo", "--help"]).output.split())
    assert f"default: {cli.DEMO_SPEED:g} for the tour, {cli.SANDBOX_SPEED:g} (real time) with --serve" in shown
    assert "10.0" not in shown
    assert CliRunner().invoke(cli.main, ["demo", "--speed", "0"]).exit_code == 2
