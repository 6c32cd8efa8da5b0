"""Every named query in a `sql/` folder is called from the code: a query nobody calls is read by
nobody, drifts from the schema unseen, and misleads the next reader. Delete it instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def test_every_named_query_is_used() -> None:
    code = "\n".join(
        path.read_text()
        for folder in ("libs", "services", "dev")
        for path in (ROOT / folder).rglob("*.py")
        if "omnium_contract" not in path.parts
    )
    queries = [
        (path.relative_to(ROOT), name)
        for pattern in ("libs/*/sql/*.sql", "services/*/omnium_*/sql/*.sql")
        for path in sorted(ROOT.glob(pattern))
        for name in NAME.findall(path.read_text())
    ]
    assert len(queries) > 200
    unused = [
        f"{name} ({path})" for path, name in queries if not re.search(rf"[\"']{name}[\"']", code)
    ]
    assert unused == [], f"named queries nobody calls: {', '.join(unused)}; delete them"
