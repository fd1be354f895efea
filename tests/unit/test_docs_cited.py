"""Every page of docs/ that the code points a reader to exists.

Given every `docs/<name>.md` named in functions/, sim/, infra/ or realplane/ (comments, docstrings, messages),
when docs/ is listed, then each named page is there — so a comment never sends a maintainer to
a page that was renamed or never written.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"docs/([A-Za-z0-9_-]+\.md)")


def _citations() -> dict[str, list[str]]:
    cited: dict[str, list[str]] = {}
    for tree in ("functions", "sim", "infra", "realplane"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            for page in CITED.findall(path.read_text(encoding="utf-8")):
                cited.setdefault(page, []).append(str(path.relative_to(ROOT)))
    return cited


def test_the_code_cites_docs_pages() -> None:
    assert len(_citations()) >= 5  # the scan finds what it is meant to find


def test_every_docs_page_the_code_cites_exists() -> None:
    missing = {page: where for page, where in _citations().items() if not (ROOT / "docs" / page).is_file()}
    assert missing == {}
