"""The examples the docs show are what gpuwarden does with them: the first policy validates and
switches every behaviour off, and the policy error shown in docs/policy.md is the one printed."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from gpuwarden.config import parse_policy
from gpuwarden.domain.errors import InvalidPolicy
from gpuwarden.domain.switches import behaviours, is_on
from gpuwarden.kinds.registry import POLICY, SWITCHES
from gpuwarden.terminal import config_error_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def block_after(text: str, marker: str) -> str:
    """The fenced block right after `<!-- marker -->`."""
    found = re.search(rf"<!-- {re.escape(marker)} -->\n```[a-z]*\n(.*?)```", text, re.DOTALL)
    assert found is not None, marker
    return found.group(1)


def test_the_first_policy_validates_and_switches_every_behaviour_off() -> None:
    # Given docs/first-policy.yaml, as a user copies it
    policy = parse_policy((DOCS / "first-policy.yaml").read_text(encoding="utf-8"), "first-policy.yaml")
    # Then every switch is there and off, rebalance's drain with them, and so is every other
    # section of the policy that has an `enabled` key (replacement launches, Karpenter expiry)
    assert [s for s in SWITCHES if is_on(policy, s)] == []
    assert set(behaviours(policy, SWITCHES).values()) == {False}
    sections = [name for name, field in POLICY.model_fields.items() if _has_enabled(field.annotation)]
    assert {"replacement", "karpenter_expiry"} <= set(sections)
    assert [name for name in sections if getattr(policy, name).enabled] == []


def _has_enabled(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel) and "enabled" in annotation.model_fields


def test_the_policy_error_docs_policy_md_shows_is_the_one_printed() -> None:
    text = (DOCS / "policy.md").read_text(encoding="utf-8")
    document, said = block_after(text, "policy-errors:document"), block_after(text, "policy-errors:said")
    try:
        parse_policy(document, "policy.yaml")
    except InvalidPolicy as err:
        printed = "\n".join(config_error_lines(err)) + "\n"
    else:
        raise AssertionError("the documented policy validates")
    assert printed == said


def test_the_readme_and_the_policy_reference_point_at_the_first_policy() -> None:
    for page in (ROOT / "README.md", DOCS / "policy.md"):
        assert "first-policy.yaml" in page.read_text(encoding="utf-8"), page
