"""What the README and docs/ show is what is true now.

- The tables a command produces are the ones it recorded: `make outcome`'s (docs/outcome.json) in
  docs/simulate.md and the README's verdict, `make bench`'s (docs/benchmarks.json) in
  docs/benchmarks.md; and the outcome was recorded with today's scenario and price table. (Running
  the week again takes minutes: `make test-long` does, below; the benchmarks measure a machine at a
  moment and are never re-run in a test.)
- The README is a tour that fits a screen (at most 300 lines), its first policy is
  docs/first-policy.yaml, its environment table names every variable gpuwarden reads.
- Every relative link in the README and docs/ leads to a file, and to a heading where it names one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim.outcome import record as outcome_record
from tests.bench import record as bench_record

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]


def test_the_simulate_page_and_the_readme_show_the_recorded_outcome() -> None:
    doc = json.loads(outcome_record.RECORD.read_text(encoding="utf-8"))
    page = outcome_record.PAGE.read_text(encoding="utf-8")
    assert outcome_record.shown(page, "outcome:table") == outcome_record.table_block(doc)
    readme = README.read_text(encoding="utf-8")
    assert outcome_record.shown(readme, "outcome:verdict") == outcome_record.verdict_block(doc)


def test_the_recorded_outcome_was_run_with_todays_scenario_and_prices() -> None:
    doc = json.loads(outcome_record.RECORD.read_text(encoding="utf-8"))
    assert doc["inputs"] == outcome_record.inputs(), "the scenario or the prices changed: run `make outcome`"


@pytest.mark.long
def test_the_recorded_outcome_is_what_the_week_gives_now() -> None:
    """`make test-long`: the built-in week again, every figure compared (timing apart)."""
    from sim.outcome.prices import load_prices
    from sim.outcome.runner import run
    from sim.outcome.scenario import load_scenario
    from sim.outcome.seeds import run_headline

    recorded = json.loads(outcome_record.RECORD.read_text(encoding="utf-8"))
    scenario, prices = load_scenario(), load_prices()
    outcome = run(scenario, prices=prices)
    headline = run_headline(scenario, scenario.headline_seeds, prices=prices)
    # as `gpuwarden simulate` writes it (cli_simulate): the verdict names the headline's weeks
    now = outcome.to_json() | {"headline": headline.to_json(), "verdict": outcome.verdict(headline.ahead())}
    for doc in (now, recorded):
        doc.pop("timing", None)
    recorded.pop("inputs")
    assert now == recorded, "gpuwarden or the simulator changed what the week gives: run `make outcome`"


def test_the_benchmarks_page_shows_every_recorded_run_and_nothing_else() -> None:
    runs = json.loads(bench_record.RECORD.read_text(encoding="utf-8"))
    page = bench_record.PAGE.read_text(encoding="utf-8")
    markers = re.findall(r"<!-- bench:([^ ]+) -->", page)
    assert sorted(markers) == sorted(runs), "a table on the page has no recorded run, or a run no table"
    assert bench_record.render_page(page, runs) == page, "run `python -m tests.bench.record` after `make bench`"
    for run in runs.values():
        assert run["date"]
        assert run["machine"]["nproc"]


def test_the_readme_is_a_tour_that_fits_a_screen() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_the_readmes_first_policy_is_the_file() -> None:
    readme = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- first-policy -->\n```yaml\n(.*?)```", readme, re.DOTALL)
    assert found is not None
    assert found.group(1) == (DOCS / "first-policy.yaml").read_text(encoding="utf-8")


def test_every_variable_gpuwarden_reads_is_in_the_readme_and_the_policy_reference() -> None:
    config = (ROOT / "functions" / "gpuwarden" / "config.py").read_text(encoding="utf-8")
    read = set(re.findall(r"\b((?:GPUWARDEN|DRY)_[A-Z_]+)\b", config)) | {"KUBECONFIG"}
    assert "GPUWARDEN_MODE" in read
    policy = (DOCS / "policy.md").read_text(encoding="utf-8")
    assert sorted(v for v in read if f"`{v}`" not in policy) == []
    # the README's table leaves out what only the stack sets (ARNs and names of its own resources)
    by_the_stack = {v for v in read if v.endswith("_ARN") or v == "GPUWARDEN_SCHEDULE_GROUP"}
    readme = README.read_text(encoding="utf-8")
    assert sorted(v for v in read - by_the_stack if f"`{v}`" not in readme) == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _outside_fences(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _outside_fences(page.read_text(encoding="utf-8")):
        if line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for line in _outside_fences(page.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(target)
    assert broken == []
