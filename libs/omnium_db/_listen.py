"""One LISTEN connection that outlives restarts and failovers, and tells its owner to catch up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

import asyncpg

from omnium_db._outage import DATABASE_ERRORS
from omnium_db._pool import connect_primary
from omnium_settings import Settings

log = logging.getLogger(__name__)

Notified = Callable[[str], None]
"""Called with a NOTIFY's payload, on the event loop; it should only wake something."""


class NotifyListener:
    """LISTEN on a set of channels over one connection, connecting again whenever it is lost.

    A NOTIFY sent while the connection is down is gone for good, so after every reconnect
    `on_reconnect` runs: it wakes whatever reads from the owner's own cursor (delivery's
    outbox cursor, the relay's watermark, the import queue), which then reads what it missed.
    It connects as the pools do (`connect_primary`): with a multi-host DSN and
    `target_session_attrs=read-write` it reaches the new primary after a failover, and a host
    that drops packets costs each try its per-host timeout, not the whole try.
    """

    def __init__(
        self,
        settings: Settings,
        channels: Mapping[str, Notified],
        *,
        name: str,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.channels = dict(channels)
        self.name = name
        self.on_reconnect = on_reconnect
        self.reconnects = 0
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        """Connect and LISTEN now; raises when PostgreSQL cannot be reached, as a pool would."""
        self._conn = await self._connect()
        self._task = asyncio.create_task(self._keep(), name=f"{self.name}: LISTEN")

    async def close(self) -> None:
        """Stop listening, also in the middle of reconnecting."""
        task, self._task = self._task, None
        cancelled = False
        try:
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    # The task's own end is expected; a cancel of whoever is closing us is not
                    # ours to swallow (it would hang a service's shutdown).
                    current = asyncio.current_task()
                    cancelled = current is not None and current.cancelling() > 0
                    if cancelled:
                        raise
        finally:
            conn, self._conn = self._conn, None
            if conn is not None and not conn.is_closed():
                if cancelled:
                    conn.terminate()
                else:
                    try:
                        await conn.close(
                            timeout=self.settings.database.listen_probe_timeout_seconds
                        )
                    except DATABASE_ERRORS:
                        conn.terminate()

    async def _connect(self) -> asyncpg.Connection:
        conn = await connect_primary(
            self.settings, server_settings={"application_name": f"{self.name}:listen"}
        )
        try:
            for channel in self.channels:
                await conn.add_listener(channel, self._notified)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._terminated)
        return conn

    def _notified(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        self.channels[channel](payload)

    def _terminated(self, conn: object) -> None:
        # Also called for a connection already replaced; only the current one matters.
        if conn is self._conn:
            self._lost.set()

    async def _keep(self) -> None:
        while True:
            reason = await self._until_lost()
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.terminate()
            # Once per outage: the tries to connect again are not logged one by one.
            log.warning(
                "%s: the LISTEN connection to PostgreSQL was lost (%s); connecting again",
                self.name,
                reason,
            )
            lost_at = time.monotonic()
            self._conn = await self._reconnect()
            self.reconnects += 1
            log.info(
                "%s: listening again after %.1f s; catching up on what was saved meanwhile",
                self.name,
                time.monotonic() - lost_at,
            )
            if self.on_reconnect is not None:
                try:
                    self.on_reconnect()
                except Exception:
                    log.exception("%s: catching up after the reconnect failed", self.name)

    async def _until_lost(self) -> str:
        """Wait until the connection closes, or stops answering (a lost machine may never
        close the socket, so it is probed now and then); why it counts as lost."""
        conn = self._conn
        assert conn is not None
        settings = self.settings
        while True:
            if self._lost.is_set() or conn.is_closed():
                return "the connection closed"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), settings.database.listen_probe_seconds)
            if self._lost.is_set() or conn.is_closed():
                return "the connection closed"
            try:
                async with asyncio.timeout(settings.database.listen_probe_timeout_seconds):
                    await conn.fetchval("SELECT 1")
            except TimeoutError:
                limit = settings.database.listen_probe_timeout_seconds
                return f"no answer to a probe within {limit} s"
            except DATABASE_ERRORS as exc:
                return str(exc) or type(exc).__name__

    async def _reconnect(self) -> asyncpg.Connection:
        settings = self.settings
        wait = settings.database.listen_retry_first_seconds
        while True:
            self._lost.clear()
            try:
                return await self._connect()
            except Exception as exc:
                # Whatever the cause (refused, timed out, still in recovery, a read-only
                # standby), the owner cannot do without its NOTIFYs: keep trying.
                log.debug("%s: connecting again failed (%s)", self.name, exc)
            await asyncio.sleep(wait)
            wait = min(wait * 2, settings.database.listen_retry_max_seconds)
