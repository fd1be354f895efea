"""`gpuwarden simulate` in dollars, and its picture (docs/simulate.md): the cost of each arm at a named
price table, the net per week, the verdict; the plot shows the table's figures, with units; a progress
line on a terminal only. The one-node scenario of test_outcome, priced by hand."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from PIL import Image

from sim.outcome.costs import arm_costs, per_week, verdict
from sim.outcome.plot import METADATA_KEY
from sim.outcome.prices import BUILTIN_PRICES, PriceTable, load_prices
from sim.outcome.runner import Arm, run_arm
from tests.sim.outcome_scenarios import GPUS, SPOT, tiny

GPUWARDEN = shutil.which("gpuwarden", path=str(Path(sys.executable).parent)) or "gpuwarden"
#: $4 an instance-hour on Spot: $1 a GPU-hour on the 4-GPU node
ROUND = {
    "as_of": "2026-01-01",
    "sources": {"spot": "a test's round number"},
    "instance_types": {"g6e.12xlarge": {"on_demand": 8.0, "spot": 4.0}},
}


def test_the_builtin_table_names_its_date_and_a_source_for_every_price() -> None:
    table = load_prices()
    assert set(table.sources) >= {"on_demand", "spot"}
    assert "karpenter-provider-aws" in table.sources["on_demand"]
    assert "aws.amazon.com/ec2/spot/pricing" in table.sources["spot"]
    assert table.instance_types["p5.48xlarge"].on_demand == pytest.approx(55.04)


def test_lost_gpu_minutes_are_priced_at_the_gpus_own_hourly_price() -> None:
    # Given nothing handling a Spot warning: 22 min x 4 GPUs are lost (test_outcome)
    result = run_arm(tiny(), Arm.NOTHING, SPOT, days=0.1)
    costs = arm_costs(result, tiny(), PriceTable.model_validate(ROUND))
    # Then at $1 a GPU-hour that is 88/60 dollars, and the instance-hours are every node's hours at $4
    assert costs["lost_work"] == pytest.approx(22 * GPUS / 60, abs=0.02)
    hours = sum(((b.down_at or result.ledger.ended_at) - b.up_at) / 3600 for b in result.ledger.nodes.values())
    assert costs["compute"] == pytest.approx(4.0 * hours, abs=0.01)
    # And the job's restart (5 min of overhead before it trains again, 4 GPUs) at the same price
    assert costs["restart_overhead"] == pytest.approx(5 * GPUS / 60, abs=0.01)
    assert costs["total"] == pytest.approx(costs["compute"] + costs["lost_work"] + costs["restart_overhead"], abs=0.01)


def test_a_week_is_seven_days_of_the_run() -> None:
    assert per_week(10.0, 0.5) == pytest.approx(140.0)


def test_a_verdict_scaled_from_fewer_days_says_so() -> None:
    costs = {"karpenter": {"compute": 100.0, "lost_work": 10.0, "total": 110.0}}
    costs["gpuwarden"] = {"compute": 90.0, "lost_work": 5.0, "total": 95.0}
    one_day = verdict(costs, 1.0, load_prices())
    assert "saves $105 a week against Karpenter alone (a week: 7 times the 1 simulated day)" in one_day
    assert "simulated day" not in verdict(costs, 7.0, load_prices())


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    doc = tiny().model_dump(mode="json") | {"days": 0.1, "seed": 3}
    doc["instance_types"][0]["spot_band"] = ">20%"
    path.write_text(json.dumps(doc))
    return path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("GPUWARDEN_", "KUBECONFIG"))}


def _figure(table: str, label: str) -> list[float]:
    line = next(x for x in table.splitlines() if x.startswith(label))
    return [float(v.replace(",", "")) for v in line[len(label) :].split()]


def test_the_table_prints_dollars_and_a_verdict_and_the_plot_shows_the_same_figures(tmp_path: Path) -> None:
    # Given the one-node scenario, a price table of round numbers and a plot to draw
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(ROUND))
    plot = tmp_path / "outcome.png"
    args = ["--scenario", str(_scenario_file(tmp_path)), "--seeds", "0", "--prices", str(prices), "--plot", str(plot)]
    done = subprocess.run(
        [GPUWARDEN, "simulate", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout
    # Then the table names the prices, prints each arm's dollars, and ends on the verdict
    assert "in dollars, prices as of 2026-01-01 (USD per instance-hour, Linux)" in table
    verdict = r"verdict: gpuwarden beside Karpenter keeps training goodput \(ETTR\) at [\d.]+% .*"
    verdict += r"; (saves|costs) \$[\d,]+ a week"
    assert re.search(verdict, table.splitlines()[-1])
    assert "real seconds" not in table  # no wall clock among the figures
    # And the PNG carries exactly the figures the table prints
    drawn = json.loads(Image.open(plot).info[METADATA_KEY])
    arms = ["nothing", "karpenter", "gpuwarden", "no-incidents"]
    for label, key in (
        ("training lost (GPU-minutes)", "training_gpu_minutes_lost"),
        ("idle GPU-hours paid", "idle_gpu_hours"),
        ("compute + lost training (USD)", "total_usd"),
        ("saved per week vs Karpenter (USD)", "saved_per_week_usd"),
    ):
        printed = _figure(table, label)
        assert printed == pytest.approx([drawn[a][key] for a in arms], abs=0.51), label


def test_a_price_table_without_the_scenarios_instance_type_is_refused_before_any_run(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: 2026-01-01\ninstance_types: {p5.48xlarge: {on_demand: 55, spot: 20}}\n")
    done = subprocess.run(
        [GPUWARDEN, "simulate", "--scenario", str(_scenario_file(tmp_path)), "--prices", str(prices)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "no price for g6e.12xlarge" in done.stderr
    assert done.stdout == ""


def test_a_progress_line_on_a_terminal_only(tmp_path: Path) -> None:
    scenario = str(_scenario_file(tmp_path))
    args = ["simulate", "--scenario", scenario, "--seeds", "0", "--days", "0.05"]
    child = pexpect.spawn(GPUWARDEN, args, env=_env(), encoding="utf-8", timeout=600, dimensions=(50, 200))
    child.expect(r"\r\x1b\[Ksimulating the run, nothing: \d+%, \d+ incidents")
    child.expect(r"simulated in \d+ s")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    piped = subprocess.run([GPUWARDEN, *args], capture_output=True, text=True, env=_env(), timeout=600, check=False)
    assert piped.returncode == 0, piped.stderr
    assert "simulating" not in piped.stderr


def test_the_builtin_price_file_is_the_one_loaded() -> None:
    assert load_prices() == load_prices(BUILTIN_PRICES)
