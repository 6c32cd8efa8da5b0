"""A delivery copy told to stop while it sends gives its clients back at once: the other copy
sends within seconds, not after the 60 s lease."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from aiohttp import web

from omnium_delivery import DeliveryApp, load_clients
from tests.support.command import settings_for
from tests.support.delivery import eventually, running_delivery, settled
from tests.support.games import EVENT, make_games

SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()
SENT_WITHIN = 10.0  # well under the lease (delivery_lease_seconds, 60 s by default)


@asynccontextmanager
async def stuck_then_ok() -> AsyncIterator[tuple[str, list[str], asyncio.Event]]:
    """A webhook receiver whose first request hangs (until `release`); later ones answer 200.
    Each request's arrival is noted, "stuck" or "ok"."""
    seen: list[str] = []
    release = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        if not seen:
            seen.append("stuck")
            await release.wait()
            return web.Response(status=503)
        seen.append("ok")
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook", seen, release
    finally:
        release.set()
        await runner.cleanup()


async def test_a_stopping_copy_hands_its_clients_to_the_other(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    await db.execute(
        "INSERT INTO medal_row (event_id, noc, gold, total, rank) VALUES ($1, 'CHN', 3, 3, 1)",
        games.event_id,
    )
    async with stuck_then_ok() as (url, seen, _release):
        client = {
            "code": "dailyhunt",
            "name": "DailyHunt",
            "event": EVENT,
            "transport": "webhook",
            "webhook": {"url": url, "secret": SECRET},
            "feeds": [{"kind": "medals", "format": "json", "top": 5}],
        }
        await load_clients(db, [client])
        first = DeliveryApp(settings_for(database_url))
        await first.start(0)
        try:
            # The first copy holds the client while its send hangs at the receiver.
            await eventually(lambda: _true(seen == ["stuck"]), within=15, what="the first send")
            held_by = await db.fetchval("SELECT leased_by FROM client WHERE code = 'dailyhunt'")
            # The other copy polls rarely: only a copy that hands over explains a quick send.
            async with running_delivery(database_url, delivery_poll_seconds=60.0) as second:
                await asyncio.sleep(1.0)  # its first look found the client held
                stopped_at = time.monotonic()
                await first.stop()
                stop_took = time.monotonic() - stopped_at
                left_by = await db.fetchval("SELECT leased_by FROM client WHERE code = 'dailyhunt'")
                await eventually(
                    lambda: _true(any(s.result.outcome == "delivered" for s in second.sent)),
                    within=SENT_WITHIN,
                    what="the other copy's send",
                )
                sent_after = time.monotonic() - stopped_at
                done = await eventually(lambda: settled(db, "dailyhunt"), what="settled")
        finally:
            if not first.stopping.is_set():
                await first.stop()
    assert held_by == first.me
    assert left_by != first.me
    assert stop_took < 5
    assert sent_after < SENT_WITHIN
    assert seen == ["stuck", "ok"]
    assert done


async def _true(value: bool) -> bool:
    return value
