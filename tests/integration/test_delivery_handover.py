"""A delivery copy told to stop lets its send in flight finish, once, and gives its clients back
at once after it: the other copy sends within seconds, not after the 60 s lease. A send still
stuck after the copy's grace is cut, and the other copy sends it."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from aiohttp import web

from omnium_delivery import DeliveryApp, Sent, load_clients
from tests.support.command import settings_for
from tests.support.delivery import running_delivery, settled
from tests.support.games import EVENT, make_games
from tests.support.waiting import eventually

SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()
SENT_WITHIN = 10.0  # well under the lease (delivery_lease_seconds, 60 s by default)


@asynccontextmanager
async def stuck_then_ok(
    answer: int = 503,
) -> AsyncIterator[tuple[str, list[str], asyncio.Event]]:
    """A webhook receiver whose first request hangs until `release`, then has `answer`; later
    ones answer 200. Each request's arrival is noted, "stuck" or "ok"."""
    seen: list[str] = []
    release = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        if not seen:
            seen.append("stuck")
            await release.wait()
            return web.Response(status=answer)
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


async def _medals_client(db: asyncpg.Connection, url: str) -> None:
    games = await make_games(db, units=1)
    await db.execute(
        "INSERT INTO medal_row (event_id, noc, gold, total, rank) VALUES ($1, 'CHN', 3, 3, 1)",
        games.event_id,
    )
    client = {
        "code": "dailyhunt",
        "name": "DailyHunt",
        "event": EVENT,
        "transport": "webhook",
        "webhook": {"url": url, "secret": SECRET},
        "feeds": [{"kind": "medals", "format": "json", "top": 5}],
    }
    await load_clients(db, [client])


async def test_a_send_in_flight_finishes_once_and_the_client_is_handed_over(
    db: asyncpg.Connection, database_url: str
) -> None:
    async with stuck_then_ok(answer=200) as (url, seen, release):
        await _medals_client(db, url)
        sent: list[Sent] = []
        # The receiver is slow, not gone: the send waits for it rather than timing out.
        first = DeliveryApp(
            settings_for(database_url, webhook_timeout_seconds=30.0), on_send=sent.append
        )
        await first.start(0)
        # The hand-overs wake the other copies' senders: heard here, the stop has begun.
        woken = asyncio.Event()
        await db.add_listener("omnium_delivery_feed", lambda *_: woken.set())
        try:
            await eventually(lambda: _true(seen == ["stuck"]), within=15, what="the first send")
            async with running_delivery(database_url, delivery_poll_seconds=60.0) as second:
                stopping = asyncio.ensure_future(first.stop())
                await asyncio.wait_for(woken.wait(), 10)
                still_sending = not stopping.done()
                release.set()  # the receiver answers the send in flight now
                await asyncio.wait_for(stopping, 15)
                left_by = await db.fetchval("SELECT leased_by FROM client WHERE code = 'dailyhunt'")
                done = await eventually(lambda: settled(db, "dailyhunt"), what="settled")
                by_second = list(second.sent)
        finally:
            if not first.stopping.is_set():
                await first.stop()
        attempts = await db.fetch("SELECT outcome FROM delivery_attempt")
    assert still_sending
    assert [s.result.outcome for s in sent] == ["delivered"]
    assert seen == ["stuck"]  # the client got the file once: the other copy never sent it
    assert by_second == []
    assert [a["outcome"] for a in attempts] == ["delivered"]
    assert left_by is None
    assert done


async def test_a_send_stuck_past_the_grace_is_cut_and_the_other_copy_sends(
    db: asyncpg.Connection, database_url: str
) -> None:
    async with stuck_then_ok() as (url, seen, _release):
        await _medals_client(db, url)
        first = DeliveryApp(settings_for(database_url, delivery_stop_grace_seconds=1.0))
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
