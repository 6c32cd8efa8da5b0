"""Reading the outbox: the shared cursor, the changes past it, and the feeds they mark owed.

Each function takes the connection its caller holds, so a pass's claim, read, marks and cursor
move stay in the one transaction the outbox loop opened (the cursor row's lock is what lets
only one copy read at a time)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from omnium_delivery._sql import QUERIES


async def claim_cursor(conn: asyncpg.Connection) -> asyncpg.Record | None:
    """The cursor (`last_id`, `recent_ids`), locked for this transaction; None while another
    copy holds it."""
    row: asyncpg.Record | None = await conn.fetchrow(QUERIES["claim_cursor"])
    return row


async def read_outbox(
    conn: asyncpg.Connection,
    *,
    after_id: int,
    recent_ids: Sequence[int],
    lag_seconds: float,
    batch_size: int,
    held_disciplines: Sequence[str],
) -> list[asyncpg.Record]:
    """The changes past `after_id`, and those inside the lag window not in `recent_ids`."""
    rows: list[asyncpg.Record] = await conn.fetch(
        *QUERIES.bind(
            "read_outbox",
            after_id=after_id,
            recent_ids=recent_ids,
            lag_seconds=lag_seconds,
            batch_size=batch_size,
            held_disciplines=held_disciplines,
        )
    )
    return rows


async def mark_feeds(
    conn: asyncpg.Connection,
    event_ids: Sequence[int],
    *,
    debounce_seconds: float,
    live_debounce_seconds: float,
) -> list[asyncpg.Record]:
    """Mark owed the feeds these outbox rows touch; the ids of the feeds marked."""
    marked: list[asyncpg.Record] = await conn.fetch(
        *QUERIES.bind(
            "mark_feeds",
            event_ids=event_ids,
            debounce_seconds=debounce_seconds,
            live_debounce_seconds=live_debounce_seconds,
        )
    )
    return marked


async def move_cursor(
    conn: asyncpg.Connection, *, last_id: int, recent_ids: Sequence[int], lag_seconds: float
) -> None:
    await conn.execute(
        *QUERIES.bind(
            "move_cursor", last_id=last_id, recent_ids=recent_ids, lag_seconds=lag_seconds
        )
    )


async def wake_readers(conn: asyncpg.Connection) -> None:
    """The outbox readers of every copy look again."""
    await conn.execute(QUERIES["wake_readers"])


async def sweep(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Mark every built feed owed again; the ids of the feeds marked."""
    marked: list[asyncpg.Record] = await conn.fetch(QUERIES["sweep"])
    return marked


async def outbox_lag(conn: asyncpg.Connection) -> asyncpg.Record:
    """`lag`: the age of the oldest change not delivered yet; `owed`: how many feeds are owed."""
    row: asyncpg.Record = await conn.fetchrow(QUERIES["outbox_lag"])
    return row
