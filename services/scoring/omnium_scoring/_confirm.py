"""Whether an action found saved is on the synchronous standby too, before it is answered so.

A save whose wait for the standby was cut (the command service's time limit, a cancel, a lost
connection) stands on the primary alone, and a failover may drop it; the road then answers
"the outcome is unknown" (services/command/README.md). A resend of it finds the action's row
here, and answers DUPLICATE, which the console counts as saved, only once this says yes.
"""

from __future__ import annotations

import asyncio

import asyncpg

from omnium_scoring._sql import QUERIES
from omnium_settings import Settings

NOT_CONFIRMED = (
    "The outcome is unknown: this action is saved on one database server, and the standby "
    "has not confirmed it yet. The action is kept and sent again; it is saved once."
)
# PostgreSQL's WARNING "canceling wait for synchronous replication": the plain warning class.
_PLAIN_WARNING = "01000"


async def on_standby(conn: asyncpg.Connection, client_id: str, settings: Settings) -> bool:
    """Lock the action's row and commit: the row lock is WAL under a transaction id, so the
    COMMIT waits for the synchronous standby, which then has everything up to it, the action
    included. False when that wait was cut (by a person's command time limit, or by the
    server's warning)."""
    seconds = settings.database.people_transaction_seconds
    cut: list[str] = []

    def hear(_conn: object, message: asyncpg.PostgresLogMessage) -> None:
        if getattr(message, "sqlstate", None) == _PLAIN_WARNING:
            cut.append(str(message))

    conn.add_log_listener(hear)
    try:
        async with asyncio.timeout(seconds), conn.transaction():
            await conn.fetchval(QUERIES["lock_saved_action"], client_id)
    except TimeoutError:
        return False
    finally:
        conn.remove_log_listener(hear)
    return not cut
