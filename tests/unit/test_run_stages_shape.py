"""The import run's package and the Scout simulator have no import circle and import nothing
inside a function; the run's context imports no stage, so every stage can take it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "services/imports/omnium_imports/run"
SIMULATOR = REPO / "services/scout-sim/omnium_scout_sim"


def _package(root: Path) -> str:
    """The dotted name of the package in `root` (omnium_imports.run)."""
    top = root
    while (top.parent / "__init__.py").exists():
        top = top.parent
    return ".".join(root.relative_to(top.parent).parts)


def _module(path: Path, root: Path) -> str:
    return _package(root) if path.stem == "__init__" else f"{_package(root)}.{path.stem}"


def _imports(path: Path, root: Path) -> set[str]:
    """The package's modules this file imports anywhere in it (TYPE_CHECKING blocks too)."""
    package = _package(root)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(package):
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(package))
    return found


def _graph(root: Path) -> dict[str, set[str]]:
    files = {_module(path, root): path for path in root.glob("*.py")}
    return {name: _imports(path, root) & set(files) for name, path in files.items()}


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of the graph, as the modules it passes, or [] when there is none."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        for dep in sorted(graph[name]):
            found = visit(dep, [*path, name])
            if found:
                return found
        done.add(name)
        return []

    for name in sorted(graph):
        found = visit(name, [])
        if found:
            return found
    return []


def _late_imports(root: Path) -> list[str]:
    late = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                late += [
                    f"{path.name}:{inner.lineno}"
                    for inner in ast.walk(node)
                    if isinstance(inner, ast.Import | ast.ImportFrom)
                ]
    return late


def test_the_graph_sees_the_modules_and_their_imports() -> None:
    graph = _graph(RUN)
    assert "omnium_imports.run._context" in graph["omnium_imports.run._stages"]
    assert "omnium_imports.run._fetch" in graph["omnium_imports.run._stages"]
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) == []


def test_the_run_and_the_simulator_have_no_circle() -> None:
    assert _circle(_graph(RUN)) == []
    assert _circle(_graph(SIMULATOR)) == []


def test_the_context_imports_no_stage() -> None:
    assert _graph(RUN)["omnium_imports.run._context"] == set()


def test_nothing_is_imported_inside_a_function() -> None:
    assert _late_imports(RUN) == []
    assert _late_imports(SIMULATOR) == []
