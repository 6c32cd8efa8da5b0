"""Least privilege: every named query of each service runs under that service's own database
role (EXPLAIN, so nothing is changed: PostgreSQL checks a statement's table privileges when its
plan starts), the SQL functions they call run under it too, and what a service has no business
doing is refused."""

from __future__ import annotations

import re

import asyncpg
import pytest

from omnium_db import MIGRATION_ROLE, SERVICE_ROLES, apply_roles
from omnium_delivery import load_clients
from tests.support.games import EVENT, make_games
from tests.support.roles_sql import SERVICE_SQL, named_queries

pytestmark = pytest.mark.timeout(180)


async def _refusal(conn: asyncpg.Connection, role: str, text: str) -> str | None:
    """Why `role` may not run `text` (None: it may), with NULL for every parameter."""
    parameters = len((await conn.prepare(text)).get_parameters())
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {role}")
            await conn.execute(f"PREPARE role_check AS {text}")
            nulls = f"({', '.join(['NULL'] * parameters)})" if parameters else ""
            await conn.execute(f"EXPLAIN EXECUTE role_check{nulls}")
            raise _RolledBack
    except asyncpg.InsufficientPrivilegeError as exc:
        return str(exc)
    except _RolledBack:
        return None
    finally:
        if await conn.fetchval("SELECT 1 FROM pg_prepared_statements WHERE name = 'role_check'"):
            await conn.execute("DEALLOCATE role_check")


class _RolledBack(Exception):
    """Leaves the transaction (and the role) behind: nothing a check did is kept."""


async def _functions_called(conn: asyncpg.Connection, texts: list[str]) -> list[str]:
    """Each of our SQL functions the statements call, as a call with NULL arguments."""
    rows = await conn.fetch(
        """SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args,
                  p.proargtypes::regtype[]::text[] AS types
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'public' AND p.prorettype <> 'trigger'::regtype"""
    )
    calls = []
    for row in rows:
        if any(re.search(rf"\b{row['proname']}\s*\(", text) for text in texts):
            nulls = ", ".join(f"NULL::{t}" for t in row["types"])
            calls.append(f"SELECT {row['proname']}({nulls})")
    return calls


@pytest.fixture
async def roles(db: asyncpg.Connection) -> asyncpg.Connection:
    await apply_roles(db)
    await apply_roles(db)  # twice: it changes nothing
    return db


async def test_every_service_runs_its_named_queries_under_its_own_role(
    roles: asyncpg.Connection,
) -> None:
    refused: list[str] = []
    checked = 0
    for service, role in SERVICE_ROLES.items():
        queries = list(named_queries(service))
        texts = [text for _, text in queries]
        for name, text in queries:
            why = await _refusal(roles, role, text)
            checked += 1
            if why:
                refused.append(f"{service} {name}: {why}")
        for call in await _functions_called(roles, texts):
            try:
                async with roles.transaction():
                    await roles.execute(f"SET LOCAL ROLE {role}")
                    await roles.execute(call)
                    raise _RolledBack
            except asyncpg.InsufficientPrivilegeError as exc:
                refused.append(f"{service} {call}: {exc}")
            except _RolledBack:
                pass
    assert not refused, "\n".join(refused)
    assert set(SERVICE_SQL) == set(SERVICE_ROLES)
    assert checked > 200


@pytest.mark.parametrize(
    ("service", "statement"),
    [
        # The public API reads; it never writes a result.
        ("gateway", "UPDATE unit SET status = status"),
        # The console's edits go through the one road, as the signed-in person.
        ("admin", "INSERT INTO timeline_item DEFAULT VALUES"),
        # Imports reads a caller's account to check its session; it never changes one.
        ("imports", "UPDATE account SET disabled = true"),
        # Password hashes and sessions are no business of delivery.
        ("delivery", "SELECT * FROM account_session"),
        # Only the road writes the outbox.
        ("scoring", "INSERT INTO domain_event DEFAULT VALUES"),
        # No service changes the schema.
        ("command", "CREATE TABLE mine (id int)"),
    ],
)
async def test_what_a_service_has_no_business_doing_is_refused(
    roles: asyncpg.Connection, service: str, statement: str
) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with roles.transaction():
            await roles.execute(f"SET LOCAL ROLE {SERVICE_ROLES[service]}")
            await roles.execute(statement)


async def test_command_may_read_the_replication_state_and_the_migrator_owns_the_schema(
    roles: asyncpg.Connection,
) -> None:
    command = SERVICE_ROLES["command"]
    assert await roles.fetchval("SELECT pg_has_role($1, 'pg_read_all_stats', 'USAGE')", command)
    others = [r for s, r in SERVICE_ROLES.items() if s not in ("command", "imports")]
    for role in others:
        assert not await roles.fetchval(
            "SELECT pg_has_role($1, 'pg_read_all_stats', 'USAGE')", role
        )
    owner = await roles.fetchval(
        "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'"
    )
    assert owner == MIGRATION_ROLE


async def test_delivery_loads_a_client_under_its_role_and_the_trigger_writes_the_outbox(
    roles: asyncpg.Connection,
) -> None:
    # Real writes, not EXPLAIN: what the plan cannot show (a trigger's insert, change_seq's
    # nextval) runs with delivery's privileges too.
    await make_games(roles, units=1)
    before = await roles.fetchval("SELECT count(*) FROM domain_event")
    await roles.execute(f"SET ROLE {SERVICE_ROLES['delivery']}")
    try:
        await load_clients(
            roles,
            [
                {
                    "code": "ndtv",
                    "event": EVENT,
                    "transport": "webhook",
                    "webhook": {"url": "https://hooks.example/ndtv", "secret": "x" * 32},
                    "checker": True,
                    "feeds": [{"kind": "results", "format": "json"}],
                }
            ],
        )
    finally:
        await roles.execute("RESET ROLE")
    kinds = await roles.fetch("SELECT kind FROM domain_event ORDER BY id OFFSET $1", before)
    assert [r["kind"] for r in kinds] == ["checker.changed"]
