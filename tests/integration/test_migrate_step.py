"""The release's migration step: one transaction per migration, a short lock wait tried again, no
statement limit, one run at a time; services that check the schema instead of migrating."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from omnium_db import (
    MIGRATIONS_DIR,
    MigrateLimits,
    MigrationBusy,
    MigrationError,
    SchemaMismatch,
    applied_versions,
    apply_migrations,
    check_schema,
)
from omnium_db._migrations import _LOCK_KEY, split_statements
from omnium_devstack.stack import dev_process_environ
from tests.support.command import CALLERS_ENV

KNOWN = len(list(MIGRATIONS_DIR.glob("*.sql")))
QUICK = MigrateLimits(lock_timeout_seconds=0.2, lock_tries=2, retry_pause_seconds=0.05)


@pytest.fixture
async def empty(empty_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(empty_url)
    try:
        yield conn
    finally:
        await conn.close()


def _folder(tmp_path: Path, *extra: str) -> Path:
    """Today's migrations and then `extra`, numbered on from them (a newer release's)."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        shutil.copy(path, folder / path.name)
    for number, sql in enumerate(extra, start=KNOWN + 1):
        (folder / f"{number:04d}_newer_{number}.sql").write_text(sql)
    return folder


def test_statements_split_outside_quotes_dollar_quotes_and_comments() -> None:
    sql = (
        "-- omnium: no transaction\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (x); -- a; comment\n"
        "SELECT 'semi;colon', \"odd;name\";\n"
        "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;\n"
        "/* a; block */ SELECT 2\n"
    )
    assert split_statements(sql) == [
        "-- omnium: no transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (x);",
        "-- a; comment\nSELECT 'semi;colon', \"odd;name\";",
        "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;",
        "/* a; block */ SELECT 2",
    ]


async def test_a_migration_marked_no_transaction_can_build_an_index_concurrently(
    empty: asyncpg.Connection, tmp_path: Path
) -> None:
    folder = _folder(
        tmp_path,
        "-- omnium: no transaction\n"
        "DROP INDEX CONCURRENTLY IF EXISTS unit_code_again;\n"
        "CREATE INDEX CONCURRENTLY unit_code_again ON unit (code);\n",
    )
    assert await apply_migrations(empty, folder) == list(range(1, KNOWN + 2))
    valid = await empty.fetchval(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = 'unit_code_again'::regclass"
    )
    assert valid is True


async def test_each_migration_is_its_own_transaction(
    empty: asyncpg.Connection, tmp_path: Path
) -> None:
    """A failing migration takes back only itself: the ones before it stay applied."""
    folder = _folder(
        tmp_path,
        "CREATE TABLE newer_one (id int);",
        "CREATE TABLE newer_two (id int);\nSELECT no_such_function();",
    )
    with pytest.raises(MigrationError, match=rf"{KNOWN + 2:04d}_newer_{KNOWN + 2}\.sql failed"):
        await apply_migrations(empty, folder)
    assert await applied_versions(empty) == list(range(1, KNOWN + 2))
    assert await empty.fetchval("SELECT to_regclass('newer_one') IS NOT NULL")
    assert not await empty.fetchval("SELECT to_regclass('newer_two') IS NOT NULL")


async def test_no_statement_limit_and_the_connection_keeps_its_own_afterwards(
    db: asyncpg.Connection, tmp_path: Path
) -> None:
    await db.execute("SET statement_timeout = '100ms'")
    folder = _folder(tmp_path, "SELECT pg_sleep(0.5);")
    assert await apply_migrations(db, folder) == [KNOWN + 1]
    assert await db.fetchval("SHOW statement_timeout") == "100ms"


async def test_a_migration_gives_way_to_a_held_lock_and_tries_again(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, "ALTER TABLE unit ADD COLUMN newer_note text;")
    blocker = await asyncpg.connect(database_url)
    try:
        await blocker.execute("BEGIN; LOCK TABLE unit IN ACCESS SHARE MODE")
        said: list[str] = []
        with pytest.raises(MigrationError, match="gave way each time") as refused:
            await apply_migrations(db, folder, limits=QUICK, say=said.append)
        assert "Nothing of it was applied" in str(refused.value)
        assert any("try 1 of 2" in line for line in said)
        assert await applied_versions(db) == list(range(1, KNOWN + 1))
        # Writers are not queued behind it meanwhile: the blocker's transaction still works.
        assert await blocker.fetchval("SELECT count(*) FROM unit") == 0

        released: list[asyncio.Task[str]] = []

        def release(line: str) -> None:
            if "trying again" in line and not released:
                released.append(asyncio.ensure_future(blocker.execute("ROLLBACK")))

        patient = MigrateLimits(lock_timeout_seconds=0.2, lock_tries=100, retry_pause_seconds=0.1)
        assert await apply_migrations(db, folder, limits=patient, say=release) == [KNOWN + 1]
        await asyncio.gather(*released)
    finally:
        await blocker.close()


async def test_a_second_migration_is_told_another_is_running(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, "CREATE TABLE newer_one (id int);")
    holder = await asyncpg.connect(database_url, server_settings={"application_name": "first"})
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        with pytest.raises(MigrationBusy, match=r"another migration is running \(first"):
            await apply_migrations(db, folder, wait_seconds=0)
        assert await applied_versions(db) == list(range(1, KNOWN + 1))

        said: list[str] = []
        released: list[asyncio.Task[str]] = []

        def release(line: str) -> None:
            said.append(line)
            if "waiting" in line:
                unlock = holder.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
                released.append(asyncio.ensure_future(unlock))

        assert await apply_migrations(db, folder, wait_seconds=60, say=release) == [KNOWN + 1]
        await asyncio.gather(*released)
        assert "another migration is running (first" in said[0]
    finally:
        await holder.close()


async def test_the_command_line_refuses_to_run_beside_another(
    database_url: str, db: asyncpg.Connection
) -> None:
    env = dev_process_environ() | {"OMNIUM_DATABASE_URL": database_url}
    holder = await asyncpg.connect(database_url)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "omnium_db", "migrate", "--no-wait",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        await holder.close()
    assert process.returncode == 3, out.decode()
    assert "migrate: another migration is running" in out.decode()
    assert "Nothing was applied" in out.decode()


async def test_the_command_line_migrates_an_empty_database(empty_url: str) -> None:
    env = dev_process_environ() | {"OMNIUM_DATABASE_URL": empty_url}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "omnium_db", "migrate",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, out.decode()
    assert f"applied 0001 to {KNOWN:04d}; the schema is at version {KNOWN}" in out.decode()


async def test_a_service_refuses_a_schema_behind_its_code(empty: asyncpg.Connection) -> None:
    with pytest.raises(SchemaMismatch, match="no omnium schema yet") as refused:
        await check_schema(empty, "command", ahead_allowed=3)
    assert "python -m omnium_db migrate" in str(refused.value)
    await empty.execute("CREATE TABLE schema_version (version int, name text, checksum text)")
    await empty.execute(
        "INSERT INTO schema_version SELECT v, 'x', 'x' FROM generate_series(1, 2) v"
    )
    with pytest.raises(SchemaMismatch) as refused:
        await check_schema(empty, "scoring", ahead_allowed=3)
    assert str(refused.value) == (
        f"scoring: this code needs schema version {KNOWN}; the database is at 2. Run the "
        "release's migration step (`python -m omnium_db migrate`) first, then start scoring again."
    )


async def test_an_older_release_runs_on_a_newer_schema_within_the_allowance(
    db: asyncpg.Connection, tmp_path: Path
) -> None:
    """A rollback: today's code on a schema two migrations newer starts when two are allowed,
    refuses when one is, and today's migrate step has nothing to do on it."""
    folder = _folder(tmp_path, "CREATE TABLE newer_one (id int);", "SELECT 1;")
    await apply_migrations(db, folder)
    assert await check_schema(db, "command", ahead_allowed=2) == KNOWN + 2
    with pytest.raises(SchemaMismatch) as refused:
        await check_schema(db, "command", ahead_allowed=1)
    assert f"at version {KNOWN + 2}, 2 migrations ahead of this code (version {KNOWN})" in str(
        refused.value
    )
    assert "OMNIUM_SCHEMA_AHEAD_ALLOWED" in str(refused.value)
    assert await apply_migrations(db) == []


async def test_the_command_process_refuses_an_unmigrated_database(empty_url: str) -> None:
    env = dev_process_environ() | {
        "OMNIUM_DATABASE_URL": empty_url,
        "OMNIUM_GRPC_CALLERS": CALLERS_ENV,
        "OMNIUM_COMMAND_PORT": "0",
        "OMNIUM_COMMAND_METRICS_PORT": "0",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "omnium_command",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    text = out.decode()
    assert process.returncode == 2, text
    assert "command: the database has no omnium schema yet" in text
    assert "Traceback" not in text
    conn = await asyncpg.connect(empty_url)
    try:
        # It never migrated on its own.
        assert await applied_versions(conn) == []
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("tool", "args"), [("omnium_accounts", ["list"]), ("omnium_imports", ["integration", "list"])]
)
async def test_the_command_line_tools_never_migrate_either(
    empty_url: str, tool: str, args: list[str]
) -> None:
    env = dev_process_environ() | {"OMNIUM_DATABASE_URL": empty_url}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", tool, *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    text = out.decode()
    assert process.returncode == 2, text
    assert "the database has no omnium schema yet" in text
    assert "python -m omnium_db migrate" in text
    conn = await asyncpg.connect(empty_url)
    try:
        assert await applied_versions(conn) == []
    finally:
        await conn.close()
