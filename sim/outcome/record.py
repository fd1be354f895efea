"""`make outcome`'s last step: the built-in week's document, recorded where the docs show it.

    python -m sim.outcome.record test-artifacts/outcome.json

Writes `docs/outcome.json` (the document `gpuwarden simulate --json` printed, with the hashes of the
scenario and price table it was run with, and without the local plot path), renders its table
between the `outcome:table` markers of docs/simulate.md and its verdict between the
`outcome:verdict` markers of README.md, and prints the table. A test checks that the docs show
what docs/outcome.json renders and that the scenario and prices have not changed since
(tests/sim/test_outcome_record.py), so the published figures cannot go stale unnoticed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from sim.outcome.prices import BUILTIN_PRICES
from sim.outcome.report import render
from sim.outcome.scenario import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "outcome.json"
PAGE = ROOT / "docs" / "simulate.md"
README = ROOT / "README.md"


def inputs() -> dict[str, str]:
    """What the built-in run depends on besides the code: the scenario and the price table."""
    return {
        "scenario_sha256": hashlib.sha256(BUILTIN.read_bytes()).hexdigest(),
        "prices_sha256": hashlib.sha256(BUILTIN_PRICES.read_bytes()).hexdigest(),
    }


def between(text: str, marker: str, body: str) -> str:
    """`text` with what stands between `<!-- marker -->` and `<!-- /marker -->` replaced by `body`."""
    pattern = re.compile(rf"(<!-- {re.escape(marker)} -->\n).*?(<!-- /{re.escape(marker)} -->)", re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no <!-- {marker} --> … <!-- /{marker} --> block")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text, count=1)


def shown(text: str, marker: str) -> str:
    found = re.search(rf"<!-- {re.escape(marker)} -->\n(.*?)<!-- /{re.escape(marker)} -->", text, re.DOTALL)
    if found is None:
        raise ValueError(f"no <!-- {marker} --> block")
    return found.group(1)


def table_block(doc: dict[str, Any]) -> str:
    return f"```text\n$ make outcome\n{render(doc)}\n```\n"


def verdict_block(doc: dict[str, Any]) -> str:
    where = f"`make outcome`: the built-in week, seed {doc['seed']}; the table in [docs/simulate.md](docs/simulate.md)"
    return f"> {doc['verdict']}\n>\n> {where}\n"


def record(doc: dict[str, Any]) -> dict[str, Any]:
    doc = {k: v for k, v in doc.items() if k != "plot"} | {"inputs": inputs()}
    RECORD.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    PAGE.write_text(between(PAGE.read_text(encoding="utf-8"), "outcome:table", table_block(doc)), encoding="utf-8")
    README.write_text(
        between(README.read_text(encoding="utf-8"), "outcome:verdict", verdict_block(doc)), encoding="utf-8"
    )
    return doc


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    doc = record(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    print(render(doc))
    print(f"\nrecorded: {RECORD.relative_to(ROOT)}, {PAGE.relative_to(ROOT)}, {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
