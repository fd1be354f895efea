"""The reference in docs/ names everything a user can meet: every kind and every policy key.

Given the registry of kinds and the models the code decides with, when docs/ and events/ are read,
then each value appears there: adding a kind without documenting it (its spec's page and anchor)
or without its sample events fails here, and so does a sample no kind claims.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel

from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.kinds.registry import POLICY, SPECS
from gpuwarden.sources import NoticeBatch

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EVENTS = ROOT / "events"


def _anchors(page: str) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them."""
    headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _policy_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys.extend(_policy_keys(annotation, prefix=f"{prefix}{name}."))
    return keys


def test_every_kind_is_documented_in_events_md() -> None:
    text = (DOCS / "events.md").read_text(encoding="utf-8")
    missing = [kind.value for kind in Kind if f"`{kind.value}`" not in text]
    assert missing == []


def test_every_kind_is_explained_where_its_spec_says() -> None:
    missing = []
    for spec in SPECS:
        page, _, anchor = spec.doc.partition("#")
        if anchor not in _anchors(page) or f"`{spec.kind.value}`" not in (ROOT / page).read_text(encoding="utf-8"):
            missing.append(f"{spec.kind.value}: {spec.doc}")
    assert missing == []


def test_every_sample_event_is_its_kinds_and_every_kind_has_one() -> None:
    claimed = {sample: spec.kind for spec in SPECS for sample in spec.samples}
    on_disk = {p.name for p in EVENTS.glob("*.json")}
    assert sorted(on_disk - set(claimed)) == []  # every sample belongs to a kind
    assert sorted(set(claimed) - on_disk) == []  # every sample a spec names is there
    assert [s.kind.value for s in SPECS if not s.samples] == []
    for sample, kind in claimed.items():
        parsed = parse_event(json.loads((EVENTS / sample).read_text(encoding="utf-8")))
        if isinstance(parsed, NoticeBatch):  # an EventBridge event is reported as its kind, even ignored
            assert parsed.kind is kind, sample


def test_every_policy_key_is_documented_in_policy_md() -> None:
    text = (DOCS / "policy.md").read_text(encoding="utf-8")
    missing = [key for key in _policy_keys(POLICY) if f"{key.rsplit('.', 1)[-1]}:" not in text]
    assert missing == []


def test_every_docs_page_is_linked_from_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert [p for p in pages if f"({p})" not in index] == []


def test_every_action_type_is_documented_in_results_md() -> None:
    from gpuwarden.domain.actions import ActionType

    text = (DOCS / "results.md").read_text(encoding="utf-8")
    missing = [action.value for action in ActionType if f"`{action.value}`" not in text]
    assert missing == []
