"""`docs/schema.sql` is the schema every migration adds up to, as `pg_dump
--schema-only` prints it: the one place a reader sees today's tables whole. This test dumps a
database migrated from nothing and fails when the file says otherwise; `make schema` writes the
file again (after a new migration)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from omnium_devstack.binaries import find_postgres

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "schema.sql"
HEADER = """\
-- The schema every migration in libs/omnium_db/migrations/ adds up to, as pg_dump
-- --schema-only prints it (owners, grants and session settings left out). Written by `make schema`;
-- tests/integration/test_schema_file.py fails when it and the migrations disagree. Read it;
-- never apply it: the migrations are what change a database.
"""
# Lines that say where and how it was dumped, not what the schema is.
NOISE = re.compile(
    r"^(-- Dumped (from|by) .*|SET .*|SELECT pg_catalog\.set_config.*|\\(un)?restrict .*)$"
)


def pg_dump() -> str:
    found = find_postgres()
    binary = found.bindir / "pg_dump" if found is not None else None
    if binary is None or not binary.is_file():
        binary = Path(shutil.which("pg_dump") or "pg_dump")
    return str(binary)


def dumped(database_url: str) -> str:
    done = subprocess.run(
        [pg_dump(), "--schema-only", "--no-owner", "--no-privileges", database_url],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if not NOISE.match(line)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return f"{HEADER}\n{text}\n"


async def test_schema_sql_is_what_the_migrations_make(database_url: str) -> None:
    schema = dumped(database_url)
    if os.environ.get("OMNIUM_WRITE_SCHEMA") == "1":
        SCHEMA.write_text(schema)
    assert SCHEMA.read_text() == schema, (
        "docs/schema.sql is not what the migrations make: run `make schema` and "
        "commit it with the migration"
    )
