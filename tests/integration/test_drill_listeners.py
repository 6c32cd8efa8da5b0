"""The failover drill sees a service's LISTEN connection in pg_stat_activity once it listens."""

from __future__ import annotations

import asyncpg

from bench.drill_failover import listening
from omnium_db import NotifyListener
from tests.support.command import settings_for


async def test_a_listener_counts_once_it_listens_and_a_bare_connection_never(
    database_url: str, db: asyncpg.Connection
) -> None:
    # Named as a listener is, but it never ran a statement (so never a LISTEN).
    bare = await asyncpg.connect(
        database_url, server_settings={"application_name": "drill-bare:listen"}
    )
    listener = NotifyListener(
        settings_for(database_url), {"omnium_drill_test": lambda _: None}, name="drill-test"
    )
    await listener.start()
    try:
        seen = await listening(db)
        started = await db.fetchval("SELECT pg_postmaster_start_time()")
    finally:
        await listener.close()
        await bare.close()
    assert seen.names["drill-test:listen"] == 1
    assert seen.names["drill-bare:listen"] == 0
    assert seen.postmaster_start == started
