"""Apply numbered .sql migrations in order and record each in schema_version."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same in every process that migrates.
_LOCK_KEY = 0x6F6D6E69756D


class MigrationError(RuntimeError):
    """The migrations on disk and those recorded in the database do not agree."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(folder: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_what_it_does.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(
            f"migrations must be numbered 1, 2, 3... without gaps; found {versions}"
        )
    return found


async def applied_versions(conn: asyncpg.Connection) -> list[int]:
    exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        return []
    rows = await conn.fetch("SELECT version FROM schema_version ORDER BY version")
    return [row["version"] for row in rows]


async def apply_migrations(conn: asyncpg.Connection, folder: Path = MIGRATIONS_DIR) -> list[int]:
    """Bring the database up to date. Safe to call from many processes at once."""
    migrations = load_migrations(folder)
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_version (
              version    int PRIMARY KEY,
              name       text NOT NULL,
              checksum   text NOT NULL,
              applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        recorded = {
            row["version"]: row
            for row in await conn.fetch("SELECT version, name, checksum FROM schema_version")
        }
        for migration in migrations:
            row = recorded.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name}.sql was changed "
                        "after it was applied. Add a new migration instead of editing an old one."
                    )
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_version (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied.append(migration.version)
        unknown = set(recorded) - {m.version for m in migrations}
        if unknown:
            raise MigrationError(
                f"the database has migrations {sorted(unknown)} that this code does not know: "
                "it is older than the database. Deploy the newer code."
            )
    return applied
