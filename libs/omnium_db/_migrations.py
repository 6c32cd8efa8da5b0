"""Apply numbered .sql migrations in order and record each in schema_version; check a service's
schema before it starts.

Migrating is a release step of its own (`python -m omnium_db migrate`, the Kubernetes Job run
before the Deployments roll); services never migrate, they only check (`check_schema`). The
rules a migration follows, expand then contract: migrations/README.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same in every process that migrates. Releases before
# the migrate step took it too (as a transaction lock) while they migrated at start-up.
_LOCK_KEY = 0x6F6D6E69756D
# A migration's first line, for statements PostgreSQL refuses inside a transaction block
# (CREATE INDEX CONCURRENTLY): each statement then runs on its own.
NO_TRANSACTION = "-- omnium: no transaction"
_LIMITS = ("statement_timeout", "idle_in_transaction_session_timeout", "lock_timeout")


class MigrationError(RuntimeError):
    """The migrations on disk and those recorded in the database do not agree, or one failed."""


class MigrationBusy(MigrationError):
    """Another process holds the migration lock."""


class SchemaMismatch(RuntimeError):
    """The database's schema is not one this code may run against."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def in_transaction(self) -> bool:
        first = self.sql.lstrip().split("\n", 1)[0].strip()
        return first.lower() != NO_TRANSACTION

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"


@dataclass(frozen=True, slots=True)
class MigrateLimits:
    """How long a migration waits for a table's lock before it gives way and tries again."""

    lock_timeout_seconds: float = 2.0
    lock_tries: int = 30
    retry_pause_seconds: float = 2.0


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


def split_statements(sql: str) -> list[str]:
    """The statements of a script, split at semicolons outside quotes, dollar quotes and
    comments (a no-transaction migration sends them one at a time)."""
    statements: list[str] = []
    start = i = 0
    n = len(sql)
    while i < n:
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif sql[i] in "'\"":
            end = sql.find(sql[i], i + 1)
            while end >= 0 and sql.startswith(sql[i] * 2, end):
                end = sql.find(sql[i], end + 2)
            i = n if end < 0 else end + 1
        elif (tag := re.match(r"\$[A-Za-z_]*\$", sql[i:])) is not None:
            end = sql.find(tag[0], i + len(tag[0]))
            i = n if end < 0 else end + len(tag[0])
        elif sql[i] == ";":
            statements.append(sql[start : i + 1])
            start = i = i + 1
        else:
            i += 1
    statements.append(sql[start:])
    return [s.strip() for s in statements if _has_code(s)]


def _has_code(statement: str) -> bool:
    without = re.sub(r"--[^\n]*", "", statement)
    return bool(re.sub(r"/\*.*?\*/", "", without, flags=re.S).strip(" \n\t;"))


async def applied_versions(conn: asyncpg.Connection) -> list[int]:
    exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        return []
    rows = await conn.fetch("SELECT version FROM schema_version ORDER BY version")
    return [row["version"] for row in rows]


async def _lock_holder(conn: asyncpg.Connection) -> str:
    row = await conn.fetchrow(
        """
        SELECT a.pid, a.application_name, a.client_addr::text AS addr,
               extract(epoch FROM now() - a.backend_start)::int AS seconds
          FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted
           AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
         LIMIT 1
        """,
        _LOCK_KEY,
    )
    if row is None:
        return "another migration is running"
    who = row["application_name"] or "a process"
    where = f" from {row['addr']}" if row["addr"] else ""
    return (
        f"another migration is running ({who}{where}, PostgreSQL pid {row['pid']}, "
        f"connected {row['seconds']} s ago)"
    )


async def _take_lock(
    conn: asyncpg.Connection, wait_seconds: float, say: Callable[[str], None]
) -> None:
    if await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK_KEY):
        return
    holder = await _lock_holder(conn)
    if wait_seconds <= 0:
        raise MigrationBusy(f"{holder}. Nothing was applied; run this again when it has finished.")
    say(f"{holder}; waiting up to {wait_seconds:g} s for it to finish")
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK_KEY):
            say("the other migration finished; going on")
            return
    raise MigrationBusy(
        f"{await _lock_holder(conn)} and still had not finished after {wait_seconds:g} s. "
        "Nothing was applied; look at that process (pg_stat_activity) before running this again."
    )


async def _apply_one(
    conn: asyncpg.Connection,
    migration: Migration,
    limits: MigrateLimits,
    say: Callable[[str], None],
) -> None:
    for attempt in range(1, limits.lock_tries + 1):
        try:
            if migration.in_transaction:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await _record(conn, migration)
            else:
                # Each statement alone, so a failure part-way leaves the earlier ones done: such
                # a migration must be safe to run again (IF NOT EXISTS, DROP ... IF EXISTS).
                for statement in split_statements(migration.sql):
                    await conn.execute(statement)
                await _record(conn, migration)
            return
        except asyncpg.LockNotAvailableError:
            if attempt == limits.lock_tries:
                raise MigrationError(
                    f"{migration.label} waited {limits.lock_timeout_seconds:g} s for a lock "
                    f"{limits.lock_tries} times and gave way each time: something holds a lock "
                    "on a table it changes (a long transaction; see pg_stat_activity). "
                    f"{'Nothing of it' if migration.in_transaction else 'Perhaps part of it'} "
                    "was applied; run the migration again once that transaction has ended."
                ) from None
            say(
                f"{migration.label}: a lock was not free within "
                f"{limits.lock_timeout_seconds:g} s (try {attempt} of {limits.lock_tries}); "
                f"trying again in {limits.retry_pause_seconds:g} s"
            )
            await asyncio.sleep(limits.retry_pause_seconds)
        except asyncpg.PostgresError as exc:
            some = "Nothing of it" if migration.in_transaction else "Perhaps part of it"
            raise MigrationError(
                f"{migration.label} failed: {exc} ({some} was applied; the migrations before "
                "it stay applied.) Fix it in a new migration, or in this file if it was never "
                "applied anywhere, and run the migration again."
            ) from exc


async def _record(conn: asyncpg.Connection, migration: Migration) -> None:
    await conn.execute(
        "INSERT INTO schema_version (version, name, checksum) VALUES ($1, $2, $3)",
        migration.version,
        migration.name,
        migration.checksum,
    )


async def apply_migrations(
    conn: asyncpg.Connection,
    folder: Path = MIGRATIONS_DIR,
    *,
    limits: MigrateLimits | None = None,
    wait_seconds: float = 600.0,
    say: Callable[[str], None] = lambda _line: None,
) -> list[int]:
    """Bring the database up to date, one transaction per migration, under a short lock
    timeout tried again and no statement limit. One process at a time: another waits up to
    `wait_seconds` for the first (0: refuses at once with MigrationBusy)."""
    limits = limits or MigrateLimits()
    migrations = load_migrations(folder)
    applied: list[int] = []
    await _take_lock(conn, wait_seconds, say)
    own = {name: await conn.fetchval("SELECT current_setting($1)", name) for name in _LIMITS}
    try:
        for name, value in (
            ("statement_timeout", "0"),
            ("idle_in_transaction_session_timeout", "0"),
            ("lock_timeout", f"{int(limits.lock_timeout_seconds * 1000)}ms"),
        ):
            await conn.execute("SELECT set_config($1, $2, false)", name, value)
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
            if row is not None and row["checksum"] != migration.checksum:
                raise MigrationError(
                    f"migration {migration.label} was changed after it was applied. "
                    "Add a new migration instead of editing an old one."
                )
        for migration in migrations:
            if migration.version in recorded:
                continue
            say(f"applying {migration.label}")
            await _apply_one(conn, migration, limits, say)
            applied.append(migration.version)
        ahead = sorted(set(recorded) - {m.version for m in migrations})
        if ahead:
            # An older release's migrate step (a rollback) has nothing to do; its services
            # decide for themselves whether they may run on this schema (check_schema).
            say(
                f"the database has migrations {ahead} that this code does not know "
                "(a newer release applied them); nothing to do"
            )
    finally:
        # The caller's connection goes back with its own limits.
        for name, value in own.items():
            await conn.execute("SELECT set_config($1, $2, false)", name, value)
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied


async def check_schema(
    conn: asyncpg.Connection,
    service: str,
    ahead_allowed: int,
    folder: Path = MIGRATIONS_DIR,
) -> int:
    """The database's schema version, when `service` may run on it: at least the newest
    migration this code knows and at most `ahead_allowed` migrations newer (the next release's
    expand steps, or a rollback). Otherwise SchemaMismatch, saying what to run."""
    needed = len(load_migrations(folder))
    versions = await applied_versions(conn)
    current = max(versions, default=0)
    missing = sorted(set(range(1, needed + 1)) - set(versions))
    run = "Run the release's migration step (`python -m omnium_db migrate`) first"
    if not versions:
        raise SchemaMismatch(
            f"{service}: the database has no omnium schema yet (this code needs version "
            f"{needed}). {run}, then start {service} again."
        )
    if missing:
        raise SchemaMismatch(
            f"{service}: this code needs schema version {needed}; the database is at {current}"
            f"{f' without {missing}' if current >= needed else ''}. {run}, then start "
            f"{service} again."
        )
    if current - needed > ahead_allowed:
        raise SchemaMismatch(
            f"{service}: the database's schema is at version {current}, {current - needed} "
            f"migrations ahead of this code (version {needed}); it runs at most {ahead_allowed} "
            "ahead (OMNIUM_SCHEMA_AHEAD_ALLOWED). Deploy the release that applied them, or "
            "raise OMNIUM_SCHEMA_AHEAD_ALLOWED if their expand steps keep this release working."
        )
    return current


async def require_schema(pool: asyncpg.Pool, service: str, ahead_allowed: int) -> int:
    """`check_schema` on one of the pool's connections: every service calls it at start-up."""
    async with pool.acquire() as conn:
        return await check_schema(conn, service, ahead_allowed)
