"""`make bench`'s last step: the run's figures, recorded where docs/benchmarks.md shows them.

    python -m tests.bench.record [tests/bench/results.json]

`tests/bench/results.json` (what `python -m tests.bench.run` wrote, not committed: it is this
machine's) becomes a run in `docs/benchmarks.json`, keyed by the benchmarks it ran: a full run
replaces every recorded run, a `--only` run replaces the record of the same selection. Each
recorded run's table is rendered (with `tests.bench.run.table`, the one the command prints)
between the `bench:<key>` markers of docs/benchmarks.md. `tests/unit/test_docs_generated.py`
checks that the page shows exactly what docs/benchmarks.json renders; re-running the benchmarks
in a test would take minutes and measure the machine of the moment, so the check is that the
published tables are the recorded runs, and the record says when and where each was measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results.json"
RECORD = ROOT / "docs" / "benchmarks.json"
PAGE = ROOT / "docs" / "benchmarks.md"
EVERY = ("cold", "latency", "drain", "mass", "gangs", "memory", "artifacts", "soak", "gpu_health", "realplane")


def key_of(ran: list[str]) -> str:
    return "all" if set(EVERY) <= set(ran) else ",".join(sorted(ran))


def rendered(run: dict[str, Any]) -> str:
    from tests.bench.common import Figure
    from tests.bench.run import table

    return table([Figure(**figure) for figure in run["figures"]]) + "\n"


def render_page(page: str, runs: dict[str, dict[str, Any]]) -> str:
    """The page with each recorded run's table between its markers (a run without markers on the
    page is left for a person to place)."""
    from sim.outcome.record import between  # the one way a generated block is put between its markers

    for key, run in runs.items():
        try:
            page = between(page, f"bench:{key}", rendered(run))
        except ValueError:
            continue
    return page


def record(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
    ran = sorted(results.get("details") or {})
    key = key_of(ran)
    if key == "all":
        runs = {}
    runs[key] = {
        "date": results["date"],
        "machine": results["machine"],
        "seconds": results["seconds"],
        "ran": ran,
        "figures": [{k: v for k, v in f.items() if k not in ("note", "extra")} for f in results["figures"]],
    }
    RECORD.write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    PAGE.write_text(render_page(PAGE.read_text(encoding="utf-8"), runs), encoding="utf-8")
    return runs


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else RESULTS
    runs = record(json.loads(path.read_text(encoding="utf-8")))
    print(f"recorded {len(runs)} run(s) in {RECORD.relative_to(ROOT)}, tables in {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
