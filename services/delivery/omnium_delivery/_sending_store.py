"""Sending's rows: client leases, the feeds due, their versions, and the record of each send.

Each function takes a connection its caller acquired; the loops in `_app` decide what runs
together on one connection, and none of these opens a transaction of its own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from omnium_delivery._build import FeedRow
from omnium_delivery._sql import QUERIES
from omnium_delivery._transport import ClientRow, Outgoing, SendResult

# -- leases on clients ---------------------------------------------------------------------


async def claim_clients(
    conn: asyncpg.Connection,
    *,
    copy: str,
    lease_seconds: float,
    busy_client_ids: Sequence[str],
    at_most: int,
) -> list[ClientRow]:
    """Up to `at_most` clients with a feed due, leased to this `copy`; none it is already
    working (`busy_client_ids`) and none another copy holds."""
    rows = await conn.fetch(
        *QUERIES.bind(
            "claim_clients",
            copy=copy,
            lease_seconds=lease_seconds,
            busy_client_ids=busy_client_ids,
            at_most=at_most,
        )
    )
    return [ClientRow(**dict(row)) for row in rows]


async def next_due(
    conn: asyncpg.Connection, *, copy: str, busy_client_ids: Sequence[str]
) -> float | None:
    """Seconds until the next feed this copy could claim falls due (negative: overdue); None
    when no feed is owed."""
    delay: float | None = await conn.fetchval(QUERIES["next_due"], copy, busy_client_ids)
    return delay


async def renew_client(
    conn: asyncpg.Connection, *, client_id: str, copy: str, lease_seconds: float
) -> None:
    await conn.execute(
        *QUERIES.bind("renew_client", client_id=client_id, copy=copy, lease_seconds=lease_seconds)
    )


async def release_client(conn: asyncpg.Connection, *, client_id: str, copy: str) -> None:
    await conn.execute(QUERIES["release_client"], client_id, copy)


async def release_clients(conn: asyncpg.Connection, *, copy: str, sending: Sequence[str]) -> int:
    """Free every client `copy` holds but those it is `sending` to; how many were freed."""
    released: int = await conn.fetchval(QUERIES["release_clients"], copy, sending)
    return released


async def postpone_client(
    conn: asyncpg.Connection, *, client_id: str, retry_seconds: float
) -> None:
    """The client's due feeds wait `retry_seconds`: it could not be reached."""
    await conn.execute(QUERIES["postpone_client"], client_id, retry_seconds)


async def wake_senders(conn: asyncpg.Connection) -> None:
    """The senders of every copy look for due feeds again."""
    await conn.execute(QUERIES["wake_senders"])


# -- feeds and their versions --------------------------------------------------------------


async def due_feeds(conn: asyncpg.Connection, client_id: str) -> list[FeedRow]:
    return [FeedRow.of(r) for r in await conn.fetch(QUERIES["due_feeds"], client_id)]


async def hold_feed(conn: asyncpg.Connection, feed: FeedRow, *, window_seconds: float) -> None:
    """A held medal table: built up to the feed's marks, nothing sent."""
    await conn.execute(
        *QUERIES.bind(
            "held_feed",
            feed_id=feed.id,
            marks=feed.marks,
            window_seconds=window_seconds,
            outbox_id=feed.wanted_id,
        )
    )


async def keep_unchanged(conn: asyncpg.Connection, feed: FeedRow, *, window_seconds: float) -> None:
    """The same bytes as the last good send: current up to the feed's marks, nothing sent."""
    await conn.execute(
        *QUERIES.bind(
            "unchanged",
            feed_id=feed.id,
            marks=feed.marks,
            window_seconds=window_seconds,
            outbox_id=feed.wanted_id,
        )
    )


async def new_version(
    conn: asyncpg.Connection, feed: FeedRow, *, version: int, content_sha: str, is_new: bool
) -> asyncpg.Record:
    """Store the version about to be sent (when `is_new`); `saved_at` and `trace_context` of
    the newest change the feed carries."""
    row: asyncpg.Record = await conn.fetchrow(
        *QUERIES.bind(
            "new_version",
            feed_id=feed.id,
            version=version,
            content_sha=content_sha,
            is_new=is_new,
            outbox_id=feed.wanted_id,
        )
    )
    return row


# -- delivery attempts ---------------------------------------------------------------------


async def record_send(
    conn: asyncpg.Connection,
    feed: FeedRow,
    item: Outgoing,
    result: SendResult,
    *,
    client_id: str,
    content_sha: str,
    saved_at: datetime | None,
    retry_seconds: float,
    window_seconds: float,
) -> None:
    """One send of `item` (a version of `feed`): its row, and the feed's state after it (see
    the statement)."""
    await conn.fetchval(
        *QUERIES.bind(
            "record_send",
            feed_id=feed.id,
            client_id=client_id,
            version=item.version,
            file_name=item.file_name,
            sha256=item.sha256,
            bytes=len(item.body),
            attempts=result.attempts,
            outcome=result.outcome,
            error=result.error,
            outbox_id=feed.wanted_id,
            saved_at=saved_at,
            delivered_at=result.delivered_at,
            resend=feed.force,
            content_sha=content_sha,
            marks=feed.marks,
            retry_seconds=retry_seconds,
            window_seconds=window_seconds,
        )
    )


async def trim_attempts(conn: asyncpg.Connection, days: int) -> int:
    """Forget sends older than `days`, but never a feed's newest; how many were forgotten."""
    gone: int = await conn.fetchval(QUERIES["trim_attempts"], days)
    return gone
