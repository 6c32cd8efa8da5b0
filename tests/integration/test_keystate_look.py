"""The fast path's look: how far back the next read of changes must reach."""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from omnium_db import init_connection
from omnium_imports._keystate import KeyStateCache
from tests.support.games import make_games, make_run


async def test_an_open_transaction_is_reached_back_to(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    await make_run(db, games)
    integration = await db.fetchval("SELECT id::text FROM integration")
    cache = KeyStateCache(integration, "unit", lag_seconds=1.0, blind_seconds=60.0)
    quiet = await db.fetchval("SELECT clock_timestamp()")
    await cache.load(db)
    assert cache.since is not None and cache.since >= quiet - timedelta(seconds=1.5)
    writer = await asyncpg.connect(database_url)
    try:
        async with writer.transaction():
            started = await writer.fetchval("SELECT now()")
            await writer.execute("SELECT pg_sleep(0.3)")
            await cache.refresh(db)
            # A write in that open transaction could commit later with a lower changed_seq:
            # the next look must reach back to when it began.
            assert cache.since <= started - timedelta(seconds=1)
    finally:
        await writer.close()


async def test_without_sight_of_other_sessions_it_reaches_back_a_fixed_window(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    await make_run(db, games)
    integration = await db.fetchval("SELECT id::text FROM integration")
    role = f"omnium_blind_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE ROLE {role} LOGIN")
    await db.execute(f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO {role}")
    await db.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
    parts = urlsplit(database_url)
    blind_url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    blind = await asyncpg.connect(blind_url)
    await init_connection(blind)
    try:
        cache = KeyStateCache(integration, "unit", lag_seconds=1.0, blind_seconds=60.0)
        now = await blind.fetchval("SELECT clock_timestamp()")
        await cache.load(blind)
    finally:
        await blind.close()
        await db.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
        await db.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role}")
        await db.execute(f"DROP ROLE {role}")
    assert cache.since is not None and cache.since <= now - timedelta(seconds=60)
