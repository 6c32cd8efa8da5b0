"""The delivery promise: per client, the share of changes delivered within its
transport's target over a sliding window; an alert when it falls under the promise, cleared when
it holds again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import httpx

from omnium_alerts import post_alert
from omnium_db import DATABASE_ERRORS
from omnium_delivery import _metrics
from omnium_delivery._sql import QUERIES
from omnium_settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClientPromise:
    """One client's sends over the window against its target."""

    client_id: str
    code: str
    name: str
    transport: str
    enabled: bool
    target_seconds: float
    sends: int
    within: int
    p50: float | None
    p95: float | None
    last_delivered_at: datetime | None
    last_error: str | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> ClientPromise:
        return cls(**dict(row))

    @property
    def share(self) -> float | None:
        """Within target / sent; None with nothing sent in the window (nothing to judge)."""
        return self.within / self.sends if self.sends else None

    @property
    def misses(self) -> int:
        return self.sends - self.within

    def broken(self, promise: float) -> bool | None:
        """True under the promise, False at or over it, None with nothing to judge."""
        share = self.share
        return None if share is None else share < promise


async def read_promise(
    conn: asyncpg.Connection, settings: Settings, code: str | None = None
) -> list[ClientPromise]:
    """Every client (or one, by code) over the last `delivery_promise_window_seconds`."""
    statement = QUERIES.statement("promise")
    rows = await conn.fetch(
        statement.text,
        *statement.args(
            {
                "code": code,
                "push_target": settings.delivery.push_target_seconds,
                "sftp_target": settings.delivery.sftp_target_seconds,
                "window_seconds": settings.delivery.promise_window_seconds,
            }
        ),
    )
    return [ClientPromise.of(r) for r in rows]


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _window(settings: Settings) -> str:
    seconds = settings.delivery.promise_window_seconds
    return f"{seconds / 60:g} minutes" if seconds >= 60 else _seconds(seconds)


def broken_message(p: ClientPromise, settings: Settings) -> str:
    share = f"{100 * (p.share or 0):.0f}%"
    slowest = f" 95 in 100 took up to {_seconds(p.p95)}." if p.p95 is not None else ""
    why = (
        f"Its newest send failed: {p.last_error}"
        if p.last_error
        else "Look at how fast its receiver answers, on the Delivery screen."
    )
    return (
        f"{p.code}: {p.within} of {p.sends} changes ({share}) reached it within "
        f"{_seconds(p.target_seconds)} of the save over the last {_window(settings)}; the "
        f"promise is {100 * settings.delivery.promise_share:.0f}%.{slowest} {why}"
    )


def kept_message(p: ClientPromise, settings: Settings) -> str:
    return (
        f"{p.code}: {p.within} of {p.sends} changes ({100 * (p.share or 0):.0f}%) within "
        f"{_seconds(p.target_seconds)} again; the promise of "
        f"{100 * settings.delivery.promise_share:.0f}% holds."
    )


class PromiseWatch:
    """Measures every client every `delivery_promise_check_seconds`: its gauges, and one open
    alert (kind `promise`) while it is under the promise. Every delivery copy may run it: the
    alert row is raised and cleared once, so each word goes to the on-duty webhook once."""

    def __init__(
        self, settings: Settings, pool: asyncpg.Pool, http: httpx.AsyncClient | None
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.http = http

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check()
            except DATABASE_ERRORS as exc:
                log.warning("delivery: the promise check failed (%s); trying again", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.delivery.promise_check_seconds)

    async def check(self) -> list[ClientPromise]:
        settings = self.settings
        async with self.pool.acquire() as conn:
            promises = await read_promise(conn, settings)
            for p in promises:
                labels = (p.transport, p.code)
                share = p.share
                _metrics.WITHIN_TARGET.labels(*labels).set(1.0 if share is None else share)
                _metrics.WINDOW_SENDS.labels(*labels).set(p.sends)
                broken = p.broken(settings.delivery.promise_share)
                # 0 with nothing to judge too: every client's series is there from the start.
                _metrics.PROMISE_BROKEN.labels(*labels).set(1 if broken else 0)
                if broken:
                    await self._raise(conn, p)
                elif broken is False:
                    await self._clear(conn, p)
        return promises

    async def _raise(self, conn: asyncpg.Connection, p: ClientPromise) -> None:
        message = broken_message(p, self.settings)
        alert_id = await conn.fetchval(QUERIES["raise_promise_alert"], p.client_id, message)
        if alert_id is None:
            return  # already open
        log.warning("delivery alert %s for %s (promise): %s", alert_id, p.code, message)
        alert = {"alert": alert_id, "client": p.code, "kind": "promise", "message": message}
        if await post_alert(self.http, self.settings, alert):
            await conn.execute(QUERIES["alert_sent"], alert_id)

    async def _clear(self, conn: asyncpg.Connection, p: ClientPromise) -> None:
        alert_id = await conn.fetchval(QUERIES["clear_promise_alert"], p.client_id)
        if alert_id is None:
            return  # none open
        message = kept_message(p, self.settings)
        log.info("delivery alert %s for %s cleared: %s", alert_id, p.code, message)
        alert = {
            "alert": alert_id,
            "client": p.code,
            "kind": "promise",
            "message": message,
            "cleared": True,
        }
        await post_alert(self.http, self.settings, alert)
