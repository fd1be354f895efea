"""The reference in docs/ names everything a user can meet: every kind and every policy key.

Given the enumerations and models the code decides with, when docs/ is read, then each value
appears there — so adding a kind or a policy key without documenting it fails here.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Policy

DOCS = Path(__file__).resolve().parents[2] / "docs"


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


def test_every_policy_key_is_documented_in_policy_md() -> None:
    text = (DOCS / "policy.md").read_text(encoding="utf-8")
    missing = [key for key in _policy_keys(Policy) if f"{key.rsplit('.', 1)[-1]}:" not in text]
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
