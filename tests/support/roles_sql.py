"""Each service's named queries (the `-- name:` statements of its sql/ folder, and of the
shared accounts files it uses), to run under the service's own database role."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from omnium_db import Queries
from omnium_scorer_web._provider_door import PUSH_KEYS_SQL

ROOT = Path(__file__).resolve().parents[2]
_ACCOUNTS = ROOT / "libs" / "omnium_accounts" / "sql"
# A service's own folder, and the accounts files whose code it calls: CallSessions (calls.sql)
# in every gRPC server that checks a caller's session; Accounts and ApiKeys (accounts.sql) in
# the console and the gateway; Assignments (assignments.sql) where scorers are assigned.
SERVICE_SQL: dict[str, tuple[Path, ...]] = {
    "command": (ROOT / "services/command/omnium_command/sql", _ACCOUNTS / "calls.sql"),
    "imports": (ROOT / "services/imports/omnium_imports/sql", _ACCOUNTS / "calls.sql"),
    "scoring": (
        ROOT / "services/scoring/omnium_scoring/sql",
        _ACCOUNTS / "calls.sql",
        _ACCOUNTS / "assignments.sql",
    ),
    "delivery": (ROOT / "services/delivery/omnium_delivery/sql",),
    "gateway": (
        ROOT / "services/public-api/omnium_gateway/sql",
        _ACCOUNTS / "accounts.sql",
        _ACCOUNTS / "assignments.sql",
    ),
    "admin": (
        ROOT / "services/admin/omnium_admin/sql",
        _ACCOUNTS / "accounts.sql",
        _ACCOUNTS / "assignments.sql",
    ),
}
# Statements a service runs that are in no sql/ folder.
INLINE: dict[str, tuple[tuple[str, str], ...]] = {
    "gateway": (("omnium_scorer_web provider door: push keys", PUSH_KEYS_SQL),),
}
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def named_queries(service: str) -> Iterator[tuple[str, str]]:
    """(name, statement with $n parameters) for every named query `service` runs, and the
    statements it runs from no sql/ folder."""
    for path in SERVICE_SQL[service]:
        folder = path if path.is_dir() else path.parent
        queries = Queries.load(folder)
        files = sorted(folder.glob("*.sql")) if path.is_dir() else [path]
        for file in files:
            for name in _HEADER.findall(file.read_text()):
                yield f"{file.name}:{name}", queries[name]
    yield from INLINE.get(service, ())
