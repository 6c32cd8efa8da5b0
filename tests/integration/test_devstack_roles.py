"""The dev stack's database roles, as `make run` and the HA profile make them: the migration step
runs as the migration login and what it makes belongs to the migration group; each service's
login is in its own group, finds its schema and may do no more than the group."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import pytest

from omnium_db import MIGRATION_ROLE, SERVICE_ROLES, apply_migrations, check_schema
from omnium_devstack.roles import grant_services, prepare_migrator, service_urls

pytestmark = pytest.mark.timeout(180)


def _migrate(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omnium_db", "migrate"],
        env={**os.environ, "OMNIUM_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _owners(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT DISTINCT c.relowner::regrole::text AS owner FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S', 'v')"
        )
        return {r["owner"] for r in rows}
    finally:
        await conn.close()


async def test_the_migration_runs_as_its_role_and_each_service_connects_as_its_own(
    empty_url: str,
) -> None:
    migrate_url = await prepare_migrator(empty_url)
    assert "postgres@" not in migrate_url
    done = _migrate(migrate_url)
    assert done.returncode == 0, done.stderr
    assert await _owners(empty_url) == {MIGRATION_ROLE}
    await grant_services(empty_url)
    await grant_services(empty_url)  # again, as after every release: changes nothing

    urls = service_urls(empty_url)
    assert set(SERVICE_ROLES) <= set(urls)
    for process, url in urls.items():
        conn = await asyncpg.connect(url)
        try:
            user = await conn.fetchval("SELECT current_user")
            assert user != "postgres"
            group = SERVICE_ROLES["scoring" if process == "providers" else process]
            assert await conn.fetchval("SELECT pg_has_role(current_user, $1, 'MEMBER')", group)
            # Every service checks its schema at start-up, under its own role.
            assert await check_schema(conn, process, 0) > 0
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("CREATE TABLE mine (id int)")
            monitor = await conn.fetchval(
                "SELECT pg_has_role(current_user, 'pg_monitor', 'MEMBER')"
            )
            assert monitor == (process == "command")
        finally:
            await conn.close()


async def test_a_schema_a_superuser_made_is_handed_to_the_migration_role(
    empty_url: str,
) -> None:
    # A dev stack from before the roles: the superuser ran the migrations.
    conn = await asyncpg.connect(empty_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    assert await _owners(empty_url) == {"postgres"}
    migrate_url = await prepare_migrator(empty_url)
    assert await _owners(empty_url) == {MIGRATION_ROLE}
    done = _migrate(migrate_url)
    assert done.returncode == 0, done.stderr
    assert "nothing to apply" in done.stdout
