"""Words name what exists: a backticked `module.function` or `function()` in docs/, the README or a
comment / docstring of the package names a function (or class, or constant) the package has.

Given every backticked name of that shape, when it is resolved against the package's modules read
as text (each module's top-level names and its classes' members), then it is there: a rename that
leaves a doc or a comment behind fails here (docs/architecture.md, "The house").
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from gpuwarden.kinds.registry import POLICY

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "functions" / "gpuwarden"
#: `module.name` (a module of the package by its last part, after an optional `folder/`) or `name()`,
#: `module.name()`.
_DOTTED = re.compile(r"(?<!`)`(?:[a-z_/]+/)?([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(\(\))?`(?!`)")
_CALLED = re.compile(r"(?<!`)`([A-Za-z_][A-Za-z0-9_]*)\(\)`(?!`)")
#: Where a called name may also live: the simulator, the real plane, the stack, the tests.
_ALSO = ("sim", "realplane", "infra", "tests")
#: Functions of other languages the docs name: PromQL's.
_NOT_PYTHON = frozenset({"rate", "changes"})


def _defined(tree: ast.Module) -> set[str]:
    """A module's top-level names (functions, classes, assignments, imports) and its classes' members."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _package() -> tuple[dict[str, set[str]], set[str]]:
    """Each module's last part → the names any module of that name defines (a package's: its
    modules too); every name defined, in the package and where the docs' called names may live."""
    by_module: dict[str, set[str]] = defaultdict(set)
    everything: set[str] = set(_NOT_PYTHON)
    for path in PACKAGE.rglob("*.py"):
        names = _defined(ast.parse(path.read_text(encoding="utf-8")))
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        by_module[stem] |= names
        by_module[path.parent.name].add(path.stem)
        everything |= names
    for tree in _ALSO:
        for path in (ROOT / tree).rglob("*.py"):
            everything |= _defined(ast.parse(path.read_text(encoding="utf-8")))
    return by_module, everything


def _pythonic(name: str, called: str) -> bool:
    """A Python name, not a Kubernetes or AWS field (`spec.nodeName`, `spec.limits`) nor a file
    (`cli.py`): called, a snake_case name with an underscore, or a class / constant."""
    return bool(called) or ("_" in name and name == name.lower()) or name[:1].isupper()


def _policy_paths(model: type[BaseModel] = POLICY, prefix: str = "") -> set[str]:
    """`gpu_idle.enabled`-style policy keys: a section shares its name with a module."""
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        paths.add(key)
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            paths |= _policy_paths(kind, f"{key}.")
    return paths


def _texts() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", *docs, *sorted(PACKAGE.rglob("*.py"))]


def unknown_names(text: str, by_module: dict[str, set[str]], everything: set[str], policy: set[str]) -> list[str]:
    """The backticked names of ``text`` that name nothing the package has."""
    missing = [
        f"{module}.{name}"
        for module, name, called in _DOTTED.findall(text)
        if module in by_module
        and _pythonic(name, called)
        and name not in by_module[module]
        and f"{module}.{name}" not in policy
    ]
    missing += [f"{name}()" for name in _CALLED.findall(text) if name not in everything]
    return missing


def test_every_named_function_exists() -> None:
    by_module, everything = _package()
    policy = _policy_paths()
    stale = {
        str(path.relative_to(ROOT)): found
        for path in _texts()
        if (found := unknown_names(path.read_text(encoding="utf-8"), by_module, everything, policy))
    }
    assert stale == {}


def test_a_name_that_does_not_exist_is_found() -> None:
    by_module, everything = _package()
    text = "the round (`drain.drain_step`, `drain_step()`), not `drain.drain_node` or `gpu_idle.enabled`"
    assert unknown_names(text, by_module, everything, _policy_paths()) == ["drain.drain_step", "drain_step()"]
