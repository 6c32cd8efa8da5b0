"""No import cycles: the modules of libs/, services/, bench/ and dev/ import each other in one
direction, so each can be read, tested and started on its own, and a resource module never waits
on a view that needs it.

The graph is read from the source with `ast`, not by importing anything. Every `import a.b` and
`from a import b` counts, at the top of a module or inside a function (a function that runs
imports just the same, only later), with relative imports resolved. Imports under
`if TYPE_CHECKING:` do not count: they never run, and annotations are strings
(`from __future__ import annotations`). `from package import name` points at the submodule
`package.name` when there is one, else at the package's `__init__`. The import Python makes of a
module's own parent package on the way is not counted: the package is already being imported
whenever the module is reached through it.
"""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Where module names start: each folder here is a sys.path entry of ours.
SOURCE_ROOTS = [
    REPO / "libs",
    *sorted(path for path in (REPO / "services").iterdir() if path.is_dir()),
    REPO,
]
# What is read under those roots; the generated contract imports only itself.
TOP_FOLDERS = ("libs", "services", "bench", "dev")
LEFT_OUT = ("omnium_contract", "node_modules", "__pycache__", ".venv")


def module_name(path: Path) -> str:
    """`libs/omnium_db/_pool.py` -> `omnium_db._pool`; a package's `__init__` is the package."""
    root = next(root for root in SOURCE_ROOTS if root in path.parents)
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every module of ours by its dotted name (node_modules and the like pruned: they are big)."""
    found: dict[str, Path] = {}
    for top in TOP_FOLDERS:
        for folder, subfolders, files in os.walk(REPO / top):
            subfolders[:] = [name for name in subfolders if name not in LEFT_OUT]
            found.update(
                (module_name(Path(folder, name)), Path(folder, name))
                for name in files
                if name.endswith(".py") and not name.endswith(("_pb2.py", "_pb2_grpc.py"))
            )
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(statements: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that can run: in every block but the body of `if TYPE_CHECKING:`.
    Only statements are walked: an import is one, so no expression can hold it."""
    for statement in statements:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            yield statement
            continue
        if not (isinstance(statement, ast.If) and _type_checking(statement.test)):
            yield from _imports(getattr(statement, "body", []))
        yield from _imports(getattr(statement, "orelse", []))
        yield from _imports(getattr(statement, "finalbody", []))
        for clause in [*getattr(statement, "handlers", []), *getattr(statement, "cases", [])]:
            yield from _imports(clause.body)


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` is, or the nearest package of ours holding it (`a.b.c` -> `a.b`)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that the module `name` (at `path`) imports when it runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*above, base] if base else above)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        found.update(filter(None, (_nearest(target, modules) for target in targets)))
    found.discard(name)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for each group of modules that reach each other (Tarjan's strongly connected
    components), as the modules in import order with the first repeated at the end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long chain of imports cannot reach Python's recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group: set[str] = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_one_loop(graph, group) for group in groups]


def _one_loop(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, through the group."""
    first = min(group)
    came_from: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(came_from[path[-1]])
                    return [first, *reversed(path[:-1]), first]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no loop found in {sorted(group)}")


def test_the_modules_and_their_imports_are_found() -> None:
    graph = import_graph()
    assert {"omnium_db._pool", "omnium_admin._views", "bench._common", "dev.games_day"} <= set(
        graph
    )
    assert not any(name.startswith("omnium.") for name in graph)
    assert "omnium_admin._pages" in graph["omnium_admin._views"]


def test_what_counts_as_an_import(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from pkg.sub import thing\n"
        "import pkg.deep.leaf, json\n"
        "if TYPE_CHECKING:\n"
        "    from pkg import typed_only\n"
        "else:\n"
        "    from pkg import at_run_time\n"
        "def later():\n"
        "    try:\n"
        "        from .. import lazy\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    names = "pkg pkg.inner pkg.inner.mod pkg.inner.sibling pkg.sub pkg.deep pkg.deep.leaf"
    modules = dict.fromkeys([*names.split(), "pkg.typed_only", "pkg.at_run_time", "pkg.lazy"], path)
    assert imported_modules("pkg.inner.mod", path, modules) == {
        "pkg.inner.sibling",
        "pkg.sub",
        "pkg.deep.leaf",
        "pkg.at_run_time",
        "pkg.lazy",
    }


def test_a_cycle_is_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_cycles() -> None:
    found = [" -> ".join(loop) for loop in cycles(import_graph())]
    assert found == [], "modules that import each other in a loop:\n" + "\n".join(found)
