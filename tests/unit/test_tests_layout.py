"""The tests' own layout: a test module imports what it shares from a helper module or a conftest.py,
never from another `test_*.py` (pytest would import that module's fixtures and tests into the importer's
namespace, and the shared helper hides inside one test file). docs/architecture.md, "The tests' shared code"."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, absolute and dotted (``from a import b`` counts ``a`` and ``a.b``,
    since ``b`` may be a module), with the line it is imported on."""
    package = list(path.relative_to(root.parent).parent.parts)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def imports_of_test_modules(root: Path) -> list[str]:
    """``file:line imports module`` for every import of a test module under ``root`` (a `tests/` tree)."""
    return [
        f"{path.relative_to(root.parent)}:{line} imports {module}"
        for path in sorted(root.rglob("*.py"))
        for line, module in imported_modules(path, root)
        if module.split(".")[0] == root.name and module.rsplit(".", 1)[-1].startswith("test_")
    ]


def test_no_module_under_tests_imports_a_test_module() -> None:
    # Shared fixtures and helpers live in conftest.py or a helper module beside the tests
    # (tests/integration/scenarios.py, tests/reliability/harness.py, tests/sim/outcome_scenarios.py, ...)
    assert imports_of_test_modules(TESTS) == []


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    # Given a tests/ tree whose modules import a test module in each way Python allows
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    for package in (tests, tests / "unit"):
        (package / "__init__.py").write_text("")
    (tests / "unit" / "test_a.py").write_text("X = 1\n")
    (tests / "unit" / "helpers.py").write_text("Y = 2\n")
    forms = {
        "test_from.py": "from tests.unit.test_a import X\n",
        "test_module.py": "from tests.unit import test_a\n",
        "test_import.py": "import tests.unit.test_a\n",
        "test_relative.py": "from .test_a import X\n",
        "test_inline.py": "def f() -> None:\n    from tests.unit.test_a import X\n",
        "test_fine.py": "from tests.unit.helpers import Y\nfrom tests.unit import helpers\n",
    }
    for name, text in forms.items():
        (tests / "unit" / name).write_text(text)
    # When the check reads the tree, Then it names each import of test_a, and nothing else
    found = imports_of_test_modules(tests)
    assert sorted(f.split(":")[0] for f in found) == sorted(
        f"tests/unit/{name}" for name in forms if name != "test_fine.py"
    ), found
    assert all(f.endswith(" imports tests.unit.test_a") for f in found), found
