"""No module over 600 lines, outside bench/ and the generated contract: a longer one is split
along its seams, so a reader finds one thing in each file."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MOST_LINES = 600
# Benchmarks print figures and may run long; the contract is generated; the rest is not ours.
LEFT_OUT = (
    REPO / "bench",
    REPO / "libs" / "omnium_contract",
    REPO / ".venv",
    REPO / ".omnium",
    REPO / "artifacts",
    REPO / "tests" / "node" / "node_modules",
)


def modules() -> list[Path]:
    """Every .py file of ours, walked with the left-out folders pruned (the venv is large)."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(REPO):
        here = Path(folder)
        subfolders[:] = sorted(
            name
            for name in subfolders
            if here / name not in LEFT_OUT and name not in (".git", "__pycache__")
        )
        found.extend(
            here / name
            for name in sorted(files)
            if name.endswith(".py") and not name.endswith(("_pb2.py", "_pb2_grpc.py"))
        )
    return found


def test_the_modules_are_found() -> None:
    found = {path.relative_to(REPO).as_posix() for path in modules()}
    assert {"services/command/omnium_command/_road.py", "tests/unit/test_module_size.py"} <= found
    assert not any(name.startswith(("bench/", "libs/omnium_contract/")) for name in found)


def test_no_module_is_over_600_lines() -> None:
    too_long = [
        f"{path.relative_to(REPO)}: {lines} lines"
        for path in modules()
        if (lines := len(path.read_text().splitlines())) > MOST_LINES
    ]
    assert too_long == []
