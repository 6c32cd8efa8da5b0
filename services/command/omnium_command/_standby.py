"""The standby watch: an alert while saves are on one database server only.

Patroni's synchronous mode is not strict here: when the standby is gone the primary goes on
alone, so scorers keep saving. Nothing answered "saved" is lost (Patroni promotes no node that
was not in sync), but until the standby is back one more loss would stop writes. The command
service, which answers "saved", says so: one alert when it starts, one when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import asyncpg
from prometheus_client import Gauge

from omnium_alerts import post_alert
from omnium_command._sql import QUERIES
from omnium_db import DATABASE_ERRORS
from omnium_settings import Settings

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

UNPROTECTED = (
    "The database has no synchronous standby: each save is on one server only. Nothing saved "
    "is lost, but until the standby streams again the loss of this server stops every write. "
    "Bring the standby back (patronictl list shows it)."
)
SYNC_STANDBYS = Gauge(
    "omnium_db_sync_standbys",
    "Standbys that confirm each commit (pg_stat_replication sync or quorum), as last read by "
    "the standby watch (only with OMNIUM_DATABASE_STANDBY_EXPECTED).",
)
PROTECTED = "The database has a synchronous standby again: every save is on two servers."


class StandbyWatch:
    """Asks the primary every `standby_check_seconds` whether a synchronous standby has each
    commit; raises the alert on the first answer of none and clears it on the first of one."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        self.settings = settings
        self.pool = pool
        self.protected: bool | None = None  # None: not known yet
        self.alerts: list[dict[str, object]] = []  # what was raised and cleared, newest last

    async def run(self, stop: asyncio.Event) -> None:
        http: httpx.AsyncClient | None = None
        if self.settings.server.alert_webhook_url:
            # Only then: the command process does not load httpx otherwise.
            from omnium_outbound import outbound_client  # noqa: PLC0415

            http = outbound_client(self.settings)
        try:
            while not stop.is_set():
                await self.check(http)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.command.standby_check_seconds):
                        await stop.wait()
        finally:
            if http is not None:
                await http.aclose()

    async def check(self, http: httpx.AsyncClient | None = None) -> None:
        try:
            async with self.pool.acquire() as conn:
                standbys = await conn.fetchval(QUERIES["sync_standbys"])
        except DATABASE_ERRORS:
            return  # no primary now: a failover; the road answers try_again meanwhile
        SYNC_STANDBYS.set(standbys)
        protected = standbys > 0
        if protected == self.protected:
            return
        was, self.protected = self.protected, protected
        if protected and was is None:
            return  # healthy at start: nothing to say
        alert = {
            "alert": "database_standby",
            "kind": "database_unprotected",
            "message": PROTECTED if protected else UNPROTECTED,
            "cleared": protected,
        }
        self.alerts.append(alert)
        if protected:
            log.info("%s", PROTECTED)
        else:
            log.warning("%s", UNPROTECTED)
        await post_alert(http, self.settings, alert)
