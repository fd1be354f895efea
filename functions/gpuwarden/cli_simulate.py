"""`gpuwarden simulate`: a week of a GPU cluster on the simulator, three arms, what was lost and paid.

The simulator (and so this command) ships with the source checkout only (`gpuwarden.checkout`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


@click.command()
@click.option(
    "--scenario",
    "scenario_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Scenario (YAML or JSON); default: the built-in week (sim/outcome/builtin.yaml).",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="gpuwarden policy (YAML or JSON) instead of the scenario's.",
)
@click.option("--seed", type=int, default=None, help="RNG seed (default: the scenario's); same seed, same numbers.")
@click.option("--days", type=float, default=None, help="Simulated days (default: the scenario's).")
@click.option(
    "--seeds",
    type=click.IntRange(min=0),
    default=None,
    help="Runs behind the headline: the Spot training pools alone, one per seed from --seed on "
    "(default: the scenario's headline_seeds; 0: none).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of the table.")
@click.option(
    "--plot",
    "plot_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG: lost GPU-minutes and idle GPU-hours per arm, one interruption per arm.",
)
def simulate(
    scenario_file: Path | None,
    policy_file: Path | None,
    seed: int | None,
    days: float | None,
    seeds: int | None,
    as_json: bool,
    plot_file: Path | None,
) -> None:
    """Run one scenario through three arms with the same events: nothing, Karpenter alone, and
    gpuwarden beside Karpenter (its real handlers, on the simulated cluster), and print what each
    lost (training GPU-minutes) and paid (idle GPU-hours)."""
    from gpuwarden.checkout import simulator

    outcome_mod = simulator("sim.outcome.runner")
    scenario_mod = simulator("sim.outcome.scenario")
    report_mod = simulator("sim.outcome.report")
    try:
        scenario = scenario_mod.load_scenario(scenario_file)
        policy = scenario.gpu_policy(_load(policy_file)) if policy_file else None
    except (ValueError, OSError) as err:
        raise click.ClickException(f"invalid scenario or policy: {err}") from err
    if plot_file is not None:
        _check_matplotlib()
    progress = _Progress() if sys.stderr.isatty() else None
    outcome = outcome_mod.run(scenario, seed=seed, days=days, policy=policy, progress=progress)
    headline = _headline(scenario, seed, seeds, days, policy, progress)
    if progress is not None:
        progress.finish()
    if plot_file is not None:
        simulator("sim.outcome.plot").write_plot(outcome, plot_file)
    if as_json:
        doc = outcome.to_json()
        if headline is not None:
            doc["headline"] = headline.to_json()
        if plot_file is not None:
            doc["plot"] = str(plot_file)
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(report_mod.table(outcome))
    if headline is not None:
        click.echo("\n".join(simulator("sim.outcome.seeds").table_lines(headline)))
    if plot_file is not None:
        click.echo(f"\nplot: {plot_file}")


def _headline(
    scenario: Any, seed: int | None, seeds: int | None, days: float | None, policy: Any, progress: Any
) -> Any:
    """The runs behind the headline (sim/outcome/seeds.py), or None when there are none."""
    from gpuwarden.checkout import simulator

    runs = scenario.headline_seeds if seeds is None else seeds
    if not runs:
        return None
    base = scenario if seed is None else scenario.model_copy(update={"seed": seed})
    return simulator("sim.outcome.seeds").run_headline(base, runs, days, policy, progress=progress)


def _load(path: Path) -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a policy is a mapping")
    doc.pop("cluster", None)
    return doc


def _check_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise click.ClickException("--plot needs matplotlib, which is not installed: pip install matplotlib") from err


class _Progress:
    """`simulating karpenter: day 3.2 of 7, 4 incidents` on one line of stderr."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self, arm: str, fraction: float, incidents: int) -> None:
        sys.stderr.write(f"\r\x1b[Ksimulating {arm}: {fraction:.0%}, {incidents} incidents")
        sys.stderr.flush()
        self.open = True

    def finish(self) -> None:
        if self.open:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
