"""Which database failures are an outage (a restart, a failover) that passes by itself."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
from asyncpg.exceptions import TargetServerAttributeNotMatched

_T = TypeVar("_T")

# Nothing reached a primary: the connection could not be made, the server is starting or
# shutting down, or the connection landed on a standby (a read-only server refuses every write).
_NOT_CONNECTED: tuple[type[BaseException], ...] = (
    asyncpg.CannotConnectNowError,
    asyncpg.ClientCannotConnectError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ReadOnlySQLTransactionError,
    TargetServerAttributeNotMatched,
)

# The connection broke while a statement was on it: if that was the commit, it may have been
# saved even though no answer came back.
_LOST: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
)


# Everything a database call raises when the database, not our SQL, is the trouble: a loop
# that must outlive an outage catches these (asyncpg's client-side errors, such as "no host is
# a primary" during a failover, derive from neither OSError nor PostgresError).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)


def connection_lost(exc: BaseException) -> bool:
    """The connection broke in the middle of a command; what it sent may have been committed."""
    if isinstance(exc, asyncpg.ClientCannotConnectError):
        return False
    if isinstance(exc, _LOST):
        return True
    # asyncpg says "connection is closed" / "connection was closed" as an InterfaceError when
    # a statement is sent on (or waits on) a connection the server has dropped.
    if isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc):
        return True
    # When the server closes a pooled connection, asyncpg's pool detaches it from the proxy we
    # hold (pool.py, `_release_on_close`): a statement sent after that, such as the road's read
    # started beside its parse, says the connection "has been released back to the pool". We
    # never use a connection past our own `async with`, so this is the crash, not our code.
    if isinstance(exc, asyncpg.InterfaceError) and "released back to the pool" in str(exc):
        return True
    # A statement sent while the protocol was still taking in the error of the connection's
    # death says "cannot switch to state N; another operation (M) is in progress" (seen in the
    # failover drill at the instant the postmaster died). Using one connection from two tasks
    # at once is refused earlier, as an InterfaceError, so this one is the database's doing.
    return isinstance(exc, asyncpg.InternalClientError) and "cannot switch to state" in str(exc)


def not_connected(exc: BaseException) -> bool:
    """No connection to a primary could be had: nothing was sent, so nothing was written.

    A TimeoutError counts only where the caller knows it came from connecting (see
    `create_pool`'s connect timeout); a statement's own time limit is the caller's to tell.
    """
    if connection_lost(exc):
        return False
    return isinstance(exc, _NOT_CONNECTED) or (
        isinstance(exc, OSError) and not isinstance(exc, TimeoutError)
    )


def is_outage(exc: BaseException) -> bool:
    """The database is restarting or failing over: the same work, tried again later, succeeds."""
    return connection_lost(exc) or not_connected(exc) or isinstance(exc, TimeoutError)


async def outlast(
    work: Callable[[], Awaitable[_T]],
    *,
    what: str,
    seconds: float,
    first_wait: float,
    max_wait: float,
    log: logging.Logger,
) -> _T:
    """`work()`, tried again with growing waits while the database is out, for up to
    `seconds`; then the last failure is raised. `work` must be safe to run twice (its own
    transaction, or a write that gives the same result when repeated)."""
    deadline = time.monotonic() + seconds
    wait = first_wait
    told = False
    while True:
        try:
            return await work()
        except Exception as exc:
            if not is_outage(exc) or time.monotonic() + wait > deadline:
                raise
            if not told:
                # Once per outage: the tries are not logged one by one.
                log.warning("%s: the database did not answer (%r); trying again", what, exc)
                told = True
        await asyncio.sleep(wait)
        wait = min(wait * 2, max_wait)


async def pool_answers(pool: asyncpg.Pool, within: float = 1.0) -> bool:
    """Whether `pool` runs a statement within `within` seconds: a ready check's question."""
    try:
        async with asyncio.timeout(within), pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
    except DATABASE_ERRORS:
        return False
    return True
