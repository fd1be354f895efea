"""Decisions read types, never message text (docs/architecture.md, "Errors raise").

A grep with a parser: in services/ and domain/ (and the adapters' classifiers of API answers), no
condition (`if`, `elif`, `while`, a conditional expression, a comprehension's `if`, a `match`
guard, a boolean function's return) reads an exception's or a Status's words: no `str(err)` of an
exception (a name an `except` bound, or one named like one), no `.message` / `.args` of anything,
no `message` variable. The message is for people (logs, results, Events); the decision is the type, the HTTP
status, or the Status cause.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "functions" / "gpuwarden"
SCANNED = [ROOT / "services", ROOT / "domain", ROOT / "adapters" / "api_status.py"]
TEXT_ATTRIBUTES = {"message", "args", "errorMessage"}
TEXT_NAMES = {"message", "msg", "error_text"}
ERROR_NAMES = {"err", "error", "exc", "e", "ex", "exception"}


def _files() -> Iterator[Path]:
    for place in SCANNED:
        yield from [place] if place.is_file() else sorted(place.rglob("*.py"))


def _conditions(tree: ast.AST) -> Iterator[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.While | ast.IfExp):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs
        elif isinstance(node, ast.match_case) and node.guard is not None:
            yield node.guard
        elif isinstance(node, ast.FunctionDef) and isinstance(node.returns, ast.Name) and node.returns.id == "bool":
            yield from (r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None)


def _reads_text(expr: ast.expr, errors: set[str]) -> str | None:
    for node in ast.walk(expr):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("str", "repr", "format")
            and any(isinstance(a, ast.Name) and a.id in errors for a in node.args)
        ):
            return f"{node.func.id}(<error>)"
        if isinstance(node, ast.Attribute) and node.attr in TEXT_ATTRIBUTES:
            return f".{node.attr}"
        if isinstance(node, ast.Name) and node.id in TEXT_NAMES:
            return node.id
    return None


def _findings(source: str, name: str) -> list[str]:
    tree = ast.parse(source)
    errors = ERROR_NAMES | {h.name for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.name}
    found = []
    for expr in _conditions(tree):
        what = _reads_text(expr, errors)
        if what is not None:
            found.append(f"{name}:{expr.lineno}: {what} in `{ast.unparse(expr)[:100]}`")
    return found


def test_no_decision_in_services_or_domain_reads_message_text() -> None:
    findings = [f for path in _files() for f in _findings(path.read_text(), str(path.relative_to(ROOT)))]
    assert findings == []


def test_the_check_finds_a_decision_on_message_text() -> None:
    # Given the shapes this check exists for
    source = """
def is_pdb(body: bytes) -> bool:
    message, causes = parse(body)
    return "disruption budget" in message.lower()

def handle(err):
    if "409" in str(err):
        retry()
    kinds = [e for e in errors if e.message.startswith("quota")]
    return "late" if "deadline" in err.args[0] else "ok"
"""
    found = _findings(source, "example.py")
    # Then each is named
    assert len(found) == 4, found
    assert any("message" in f for f in found)
    assert any("str(<error>)" in f for f in found)
    assert any(".args" in f for f in found)


def test_the_check_lets_a_decision_on_types_and_causes_through() -> None:
    source = """
def is_pdb(body: bytes) -> bool:
    _, causes = parse(body)
    return any(c.get("reason") == "DisruptionBudget" for c in causes)

def handle(err):
    if isinstance(err, Conflict) or err.status == 409:
        retry()
    log(f"failed: {err}")
    return "nth" in str(meta.get("name", ""))
"""
    assert _findings(source, "example.py") == []
