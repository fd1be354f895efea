"""docs/permissions.md is what the stack and the RBAC grant: regenerated from the synthesized
stack and the RBAC table, it must equal the committed page; every IAM action has a reason."""

from __future__ import annotations

from pathlib import Path

from infra.permissions import WHY, iam_rows, render, synthesized_template

PAGE = Path(__file__).resolve().parents[2] / "docs" / "permissions.md"


def test_the_permissions_page_matches_the_stack_and_the_rbac() -> None:
    # Given the stack synthesized with every optional permission, and the RBAC table
    template = synthesized_template()
    # Then every IAM action it grants has a reason
    actions = {row[0] for row in iam_rows(template)}
    assert actions - WHY.keys() == set(), "add the reason to infra/permissions.py WHY"
    # And the committed page is exactly what they render (python -m infra.permissions > docs/permissions.md)
    assert PAGE.read_text(encoding="utf-8") == render(template)


def test_the_page_names_the_actions_a_security_review_asks_about() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for action in ("ec2:RunInstances", "ec2:CreateFleet", "iam:PassRole", "scheduler:CreateSchedule"):
        assert f"`{action}`" in text
    for verb_row in ("`pods/eviction` | create", "`nodes` | get, list, patch"):
        assert verb_row in text
    assert "Karpenter" in text
    assert "Python" in text
