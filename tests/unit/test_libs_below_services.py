"""Libraries sit below services: no module under libs/ imports a service's package."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def service_packages() -> set[str]:
    """The packages the folders under services/ hold (omnium_command, omnium_imports...)."""
    return {init.parent.name for init in REPO.glob("services/*/*/__init__.py")}


def imported(path: Path) -> set[str]:
    """The top-level names a module imports, at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_every_service_package_is_found() -> None:
    assert {"omnium_command", "omnium_imports", "omnium_delivery", "omnium_gateway"} <= (
        service_packages()
    )


def test_no_library_imports_a_service() -> None:
    services = service_packages()
    upward = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in sorted((REPO / "libs").rglob("*.py"))
        for name in sorted(imported(path) & services)
    ]
    assert upward == []
