"""`gpuwarden simulate`: a week of a GPU cluster on the simulator, three arms, what was lost and paid.

The simulator (and so this command) ships with the source checkout only (`gpuwarden.checkout`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from gpuwarden.cli_exits import refuse


@click.command(short_help="A week of a GPU cluster on the simulator, three arms: what each lost and paid.")
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
@click.option(
    "--days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Simulated days, more than 0 (default: the scenario's).",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=0),
    default=None,
    help="Runs behind the headline: the Spot training pools alone, one per seed from --seed on "
    "(default: the scenario's headline_seeds; 0: none).",
)
@click.option(
    "--prices",
    "prices_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Hourly prices (YAML or JSON, the shape of sim/outcome/prices.yaml) instead of the built-in table.",
)
@click.option(
    "--scale",
    type=click.IntRange(min=1),
    default=1,
    help="Run the scenario's cluster this many times over (nodes, jobs, replicas, notebooks) [default: 1].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of the table.")
@click.option(
    "--plot",
    "plot_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    callback=lambda _ctx, _param, value: _plot_target(value),
    help="Write a PNG (needs matplotlib; the folder must exist): lost GPU-minutes and idle GPU-hours "
    "per arm, one interruption per arm.",
)
def simulate(
    scenario_file: Path | None,
    policy_file: Path | None,
    seed: int | None,
    days: float | None,
    seeds: int | None,
    prices_file: Path | None,
    scale: int,
    as_json: bool,
    plot_file: Path | None,
) -> None:
    """Run one scenario through three arms with the same events: nothing, Karpenter alone, and
    gpuwarden beside Karpenter (its real handlers, on the simulated cluster); print what each lost
    (training GPU-minutes, and why) and paid (instance-hours, idle GPUs), in dollars at a named price
    table, and the verdict (docs/simulate.md). A terminal gets a progress line on stderr."""
    from gpuwarden.checkout import simulator

    outcome_mod = simulator("sim.outcome.runner")
    scenario = _scenario(simulator("sim.outcome.scenario"), scenario_file).scaled(scale)
    policy = _policy(scenario, policy_file) if policy_file else None
    prices = _prices(simulator("sim.outcome.prices"), prices_file, scenario)
    progress = _Progress() if sys.stderr.isatty() else None
    began = time.monotonic()
    outcome = outcome_mod.run(
        scenario, seed=seed, days=days, policy=policy, progress=progress, prices=prices, label="the run, "
    )
    headline = _headline(scenario, seed, seeds, days, policy, progress, prices)
    if progress is not None:
        progress.finish(f"simulated in {time.monotonic() - began:.0f} s")
    doc = outcome.to_json()
    if headline is not None:
        doc["headline"] = headline.to_json()
        if doc.get("verdict"):
            doc["verdict"] = outcome.verdict(headline.ahead())
    if plot_file is not None:
        doc["plot"] = str(simulator("sim.outcome.plot").write_plot(outcome, plot_file))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(simulator("sim.outcome.report").render(doc))


def _headline(
    scenario: Any, seed: int | None, seeds: int | None, days: float | None, policy: Any, progress: Any, prices: Any
) -> Any:
    """The runs behind the headline (sim/outcome/seeds.py), or None when there are none."""
    from gpuwarden.checkout import simulator

    runs = scenario.headline_seeds if seeds is None else seeds
    if not runs:
        return None
    base = scenario if seed is None else scenario.model_copy(update={"seed": seed})
    return simulator("sim.outcome.seeds").run_headline(base, runs, days, policy, progress=progress, prices=prices)


def _prices(prices_mod: Any, path: Path | None, scenario: Any) -> Any:
    """The price table, validated before any run: every instance type the scenario runs is priced."""
    from pydantic import ValidationError

    from gpuwarden.domain.policy import validation_problems

    where = path or prices_mod.BUILTIN_PRICES
    try:
        table = prices_mod.load_prices(path)
    except ValidationError as err:
        refuse(
            [
                f"gpuwarden: invalid prices {where}:",
                *(f"  {p}" for p in validation_problems(err, prices_mod.PriceTable)),
            ]
        )
    except (ValueError, OSError) as err:
        refuse([f"gpuwarden: invalid prices {where}: {' '.join(str(err).split())}"])
    missing = table.missing({pool.instance_type for pool in scenario.pools})
    if missing:
        refuse([f"gpuwarden: invalid prices {where}: no price for {', '.join(missing)}, which the scenario runs"])
    return table


def _scenario(scenario_mod: Any, path: Path | None) -> Any:
    from pydantic import ValidationError

    from gpuwarden.domain.policy import validation_problems

    try:
        return scenario_mod.load_scenario(path)
    except ValidationError as err:
        model = scenario_mod.Scenario
        refuse([f"gpuwarden: invalid scenario {path}:", *(f"  {p}" for p in validation_problems(err, model))])
    except (ValueError, OSError) as err:  # not YAML, not a mapping
        refuse([f"gpuwarden: invalid scenario {path}: {' '.join(str(err).split())}"])


def _policy(scenario: Any, path: Path) -> Any:
    """The policy file, validated as `invoke` validates GPUWARDEN_POLICY_FILE (the scenario's
    cluster stands in for the file's)."""
    import yaml

    from gpuwarden.config import parse_policy
    from gpuwarden.domain.errors import InvalidPolicy
    from gpuwarden.terminal import config_error_lines

    text = path.read_text(encoding="utf-8")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None  # parse_policy says why, as it does for invoke
    if isinstance(doc, dict):
        text = json.dumps(doc | {"cluster": scenario.cluster}, default=str)
    try:
        return parse_policy(text, str(path))
    except InvalidPolicy as err:
        refuse(config_error_lines(err))


def _plot_target(path: Path | None) -> Path | None:
    """--plot checked before the run: matplotlib there, the folder there (never created), a format
    matplotlib writes. Each refusal is a usage error (exit 2)."""
    if path is None:
        return None
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise click.BadParameter("needs matplotlib, which is not installed: pip install matplotlib") from None
    if not path.parent.is_dir():
        raise click.BadParameter(f"folder {path.parent} does not exist (it is not created for you)")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        raise click.BadParameter(f"{path.name}: the file name must end in one of {', '.join(sorted(formats))}")
    return path


class _Progress:
    """`simulating the run, karpenter: day 3.2 of 7, 4 incidents` on one line of stderr, rewritten in
    place (a terminal only: the caller checks)."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self, what: str, fraction: float, incidents: int) -> None:
        sys.stderr.write(f"\r\x1b[Ksimulating {what}: {fraction:.0%}, {incidents} incidents")
        sys.stderr.flush()
        self.open = True

    def finish(self, summary: str) -> None:
        if self.open:
            sys.stderr.write(f"\r\x1b[K{summary}\n")
            sys.stderr.flush()
