"""The house keeps its shape: no import circle, use cases that import the engine and never each
other, nothing below the dispatch that imports it, no use case that reads the kinds (their specs
bind them), one module per kind, files a reader can hold.

Given the source trees read as text (every import, at the top of a module or inside a function),
when the import graph is built, then these rules hold (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = "gpuwarden.services"
KINDS = "gpuwarden.kinds"
#: The modules of gpuwarden/kinds/ that are not kinds: what a spec is, the registry, its parsing.
_NOT_KINDS = ("spec", "registry", "inputs")
USE_CASES = ("notices", "runbook", "windows", "doctor")


def _modules(tree: Path, package_root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(tree.rglob("*.py")):
        parts = list(path.relative_to(package_root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The known modules `name` imports (``from a import b`` counts as a.b when that is a module)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {m for m in out if m in known and m != name}


def _graph(tree: str, package_root: str) -> dict[str, set[str]]:
    modules = _modules(ROOT / tree, ROOT / package_root)
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _without_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's __init__ re-exporting its modules is not a circle: leave the packages out."""
    packages = {m for m in graph if any(other.startswith(m + ".") for other in graph)}
    return {m: deps - packages for m, deps in graph.items() if m not in packages}


@pytest.mark.parametrize(("tree", "package_root"), [("functions/gpuwarden", "functions"), ("sim", ".")])
def test_no_import_circle(tree: str, package_root: str) -> None:
    assert _cycles(_without_packages(_graph(tree, package_root))) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_use_cases_import_the_engine_never_each_other() -> None:
    graph = _graph("functions/gpuwarden", "functions")
    crossing = [
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if m.startswith(f"{SERVICES}.")
        and d.startswith(f"{SERVICES}.")
        and m.split(".")[2] in USE_CASES
        and d.split(".")[2] in USE_CASES
        and m.split(".")[2] != d.split(".")[2]
    ]
    assert crossing == []


def test_nothing_below_the_dispatch_imports_it() -> None:
    graph = _graph("functions/gpuwarden", "functions")
    assert f"{SERVICES}.dispatch" in graph
    below = [m for m, deps in graph.items() if f"{SERVICES}.dispatch" in deps and m.startswith(f"{SERVICES}.")]
    assert below == []


def test_the_engine_and_the_use_cases_never_read_the_kinds() -> None:
    """The kinds' specs bind the engine and the use cases; only the dispatch reads the registry."""
    graph = _graph("functions/gpuwarden", "functions")
    reading = [
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if m.startswith(f"{SERVICES}.") and m != f"{SERVICES}.dispatch" and d.startswith(f"{KINDS}.")
    ]
    assert reading == []


def _room(module: str) -> str:
    """A kind's room: its module (a thin kind) or its package (a fat kind, a family of kinds)."""
    return ".".join(module.split(".")[:3])


def test_a_kind_is_one_room_that_imports_no_other_kind() -> None:
    graph = _graph("functions/gpuwarden", "functions")
    specs = [m for m in graph if m.startswith(f"{KINDS}.") and m.split(".")[2] not in _NOT_KINDS]
    assert len({_room(m) for m in specs}) >= 11  # every contract kind has its room
    crossing = [
        (m, d)
        for m in specs
        for d in graph[m]
        if d.startswith(f"{KINDS}.") and d != f"{KINDS}.spec" and _room(d) != _room(m)
    ]
    assert crossing == []


def test_the_services_folder_holds_at_most_eight_modules() -> None:
    direct = [p.name for p in (ROOT / "functions/gpuwarden/services").glob("*.py")]
    assert len(direct) <= 8, direct


@pytest.mark.parametrize("tree", ["functions", "sim", "realplane"])
def test_no_file_over_400_lines(tree: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n for p in (ROOT / tree).rglob("*.py") if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}


def test_the_command_line_module_stays_small() -> None:
    assert len((ROOT / "functions/gpuwarden/cli.py").read_text().splitlines()) <= 250


def test_no_e2e_test_imports_another_test() -> None:
    """What the scenes share lives in a module that is not a test (tests/e2e/world.py, scene.py),
    so that no scene runs another's tests by importing it."""
    importing = [
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / "tests" / "e2e").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module
        for name in [node.module]
        if name.startswith("tests.") and name.rsplit(".", 1)[1].startswith("test_")
    ]
    assert importing == []


@pytest.mark.parametrize("tree", ["realplane", "tests/e2e"])
def test_no_private_name_of_the_simulator_is_imported(tree: str) -> None:
    private = [
        (str(path.relative_to(ROOT)), node.module, alias.name)
        for path in sorted((ROOT / tree).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sim"
        for alias in node.names
        if alias.name.startswith("_") or any(part.startswith("_") for part in (node.module or "").split("."))
    ]
    assert private == []


def test_no_helper_of_the_tests_over_400_lines() -> None:
    """The modules the tests share (not the tests themselves) stay files a reader can hold."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "tests").rglob("*.py")
        if not p.name.startswith("test_") and (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}


#: The package's floors, bottom first (docs/architecture.md, "Where each behaviour lives"): a module
#: is on the floor of the longest prefix that names it; the rest (handlers, local, cli, wiring, …)
#: is the top.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("gpuwarden.domain", "gpuwarden.observability"),
    ("gpuwarden.sources", "gpuwarden.adapters"),
    (f"{SERVICES}.engine",),
    (SERVICES,),  # the use cases
    (KINDS,),
    ("gpuwarden.config",),
    (f"{SERVICES}.dispatch",),
)


def _floor(module: str) -> int:
    named = [
        (len(p), i) for i, prefixes in enumerate(FLOORS) for p in prefixes if module == p or module.startswith(p + ".")
    ]
    return max(named)[1] if named else len(FLOORS)


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, d) for m, deps in graph.items() for d in deps if _floor(d) > _floor(m))


def test_no_import_runs_up_a_floor() -> None:
    assert _upward(_graph("functions/gpuwarden", "functions")) == []


def test_the_floor_finder_finds_an_arrow_up() -> None:
    graph = {f"{SERVICES}.engine.drain": {"gpuwarden.handlers._runtime", "gpuwarden.domain.drain"}}
    assert _upward(graph) == [(f"{SERVICES}.engine.drain", "gpuwarden.handlers._runtime")]


def test_the_dispatch_reads_the_kinds_only_through_the_registry() -> None:
    graph = _graph("functions/gpuwarden", "functions")
    rooms = [
        d for d in graph[f"{SERVICES}.dispatch"] if d.startswith(f"{KINDS}.") and d.split(".")[2] not in _NOT_KINDS
    ]
    assert rooms == []


def _kinds_named(source: str) -> list[str]:
    """Every ``Kind.X`` a module's code names (what it would branch on, instead of a spec's field)."""
    return sorted(
        f"Kind.{node.attr}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Kind"
    )


def test_the_dispatch_and_the_entries_name_no_kind() -> None:
    """What the dispatch, the command line's runner and the handlers branch on is a field of a
    kind's spec (`KindSpec.route`, `unrouted`, `ticks`, `scan`, …), read in the registry."""
    entries = [ROOT / "functions/gpuwarden/services/dispatch.py", ROOT / "functions/gpuwarden/local.py"]
    entries += sorted((ROOT / "functions/gpuwarden/handlers").glob("*.py"))
    named = {str(p.relative_to(ROOT)): found for p in entries if (found := _kinds_named(p.read_text(encoding="utf-8")))}
    assert named == {}


def test_the_kind_finder_finds_a_kind_named() -> None:
    assert _kinds_named("spec_of(Kind.MANUAL).hooks\nkind.value") == ["Kind.MANUAL"]


#: What the entries may take from the dispatch besides `handle`: the way back, the drain
#: workflow's round, and what an input that failed before it was routed reports as.
_NOT_INPUTS = {"handle_release", "drain_round", "fallback_kind", "tick_kind"}


def _dispatch_entries(source: str) -> set[str]:
    """The names a module imports from the dispatch to run an input with."""
    return {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == f"{SERVICES}.dispatch"
        for alias in node.names
    } - _NOT_INPUTS


def test_the_handlers_and_the_local_runner_enter_the_dispatch_at_one_place() -> None:
    entries = [ROOT / "functions/gpuwarden/local.py", *sorted((ROOT / "functions/gpuwarden/handlers").glob("*.py"))]
    used = {str(p.relative_to(ROOT)): names for p in entries if (names := _dispatch_entries(p.read_text()))}
    assert set().union(*used.values()) == {"handle"}, used
