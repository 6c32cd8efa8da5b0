"""Live push: the SSE routes on a plain aiohttp app, Last-Event-ID resume, and save → event."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis
from aiohttp import web

from omnium.command.v1 import command_pb2
from omnium_live import LivePublisher, add_live_routes, stream_key
from tests.support.command import running_command
from tests.support.delivery import running_delivery
from tests.support.games import EVENT, make_games
from tests.support.servers import Servers
from tests.support.sse import read_events

UNIT_A = "ATHM100M--------------FNL-000100--"
UNIT_B = "ATHM200M--------------FNL-000100--"


@asynccontextmanager
async def live_app(redis_url: str, **options: Any) -> AsyncIterator[tuple[str, aioredis.Redis]]:
    redis = aioredis.from_url(redis_url)
    app = web.Application()
    add_live_routes(app, redis, heartbeat_seconds=0.2, **options)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", redis
    finally:
        await runner.cleanup()
        await redis.aclose()


async def test_events_stream_and_resume_from_last_event_id(servers: Servers) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    async with live_app(servers.redis_url) as (base, redis):
        publisher = LivePublisher(redis, max_length=100)
        url = f"{base}/v1/events/{event}/live"
        reader = asyncio.create_task(read_events(url, 3))
        await asyncio.sleep(0.3)
        ids = await publisher.publish(
            event,
            [
                {"kind": "unit.changed", "unit": UNIT_A, "n": 1},
                {"kind": "unit.changed", "unit": UNIT_B, "n": 2},
                {"kind": "medal_row.changed", "n": 3},
            ],
        )
        got = await reader
        assert [e["id"] for e in got] == ids
        assert [e["event"] for e in got] == ["unit.changed", "unit.changed", "medal_row.changed"]
        await publisher.publish(event, [{"kind": "unit.changed", "unit": UNIT_A, "n": 4}])
        # A client that saw the first event reconnects: it gets the rest, nothing twice.
        resumed = await read_events(url, 3, {"Last-Event-ID": ids[0]})
        assert [e["data"]["n"] for e in resumed] == [2, 3, 4]
        # One unit's stream carries only that unit, and resumes the same way.
        unit_url = f"{base}/v1/events/{event}/units/{UNIT_A}/live"
        only_a = await read_events(unit_url, 2, {"Last-Event-ID": "0-0"})
        assert [e["data"]["n"] for e in only_a] == [1, 4]
        await redis.delete(stream_key(event))


async def test_a_resume_older_than_the_buffer_says_so(servers: Servers) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    async with live_app(servers.redis_url) as (base, redis):
        publisher = LivePublisher(redis, max_length=1)
        first = await publisher.publish(event, [{"kind": "x", "n": 0}])
        # Exact trimming, so the first entry is surely gone from the replay buffer.
        for n in range(1, 5):
            await redis.xadd(
                stream_key(event),
                {"kind": "x", "data": json.dumps({"n": n})},
                maxlen=2,
                approximate=False,
            )
        got = await read_events(f"{base}/v1/events/{event}/live", 3, {"Last-Event-ID": first[0]})
        assert got[0]["event"] == "gap"
        assert [e["data"]["n"] for e in got[1:]] == [3, 4]
        # "From the start" of a stream that was trimmed is older than it too.
        for start in ("0-0", "0"):  # Redis reads "<ms>" as "<ms>-0", and so do we
            whole = await read_events(f"{base}/v1/events/{event}/live", 3, {"Last-Event-ID": start})
            assert whole[0]["event"] == "gap"
            assert [e["data"]["n"] for e in whole[1:]] == [3, 4]
        await redis.delete(stream_key(event))


async def test_a_stream_past_its_time_ends_with_a_hint_and_resumes_with_nothing_missed(
    servers: Servers,
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    async with (
        live_app(servers.redis_url, max_seconds=1.0) as (base, redis),
        aiohttp.ClientSession() as http,
    ):
        publisher = LivePublisher(redis, max_length=100)
        url = f"{base}/v1/events/{event}/live"
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with http.get(url) as response:
            reading = asyncio.create_task(response.content.read())
            await asyncio.sleep(0.3)
            first = await publisher.publish(event, [{"kind": "x", "n": 1}])
            body = (await asyncio.wait_for(reading, 10)).decode()
        lasted = loop.time() - started
        # Published while no stream was open: the reconnect's replay brings it.
        await publisher.publish(event, [{"kind": "x", "n": 2}])
        resumed = await read_events(url, 1, {"Last-Event-ID": first[0]})
        await redis.delete(stream_key(event))
    assert 1.0 <= lasted < 5.0, lasted
    assert f"id: {first[0]}" in body and "this stream has run its time" in body, body
    assert body.rstrip().splitlines()[-1].startswith("retry: "), body
    assert [e["data"]["n"] for e in resumed] == [2]


async def test_bad_requests_get_a_plain_answer(servers: Servers) -> None:
    async with live_app(servers.redis_url) as (base, _), aiohttp.ClientSession() as http:
        for path, headers, words in [
            ("/v1/events/bad code/live", {}, "is not a Games code"),
            ("/v1/events/AG2026/units/SHORT/live", {}, "is not a unit code"),
            ("/v1/events/AG2026/live", {"Last-Event-ID": "yesterday"}, "is not an id"),
        ]:
            async with http.get(base + path, headers=headers) as response:
                assert response.status == 400
                assert words in (await response.json())["error"]


async def test_a_saved_change_reaches_sse_listeners(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=2)
    unit_code = games.unit_codes[games.units[0]]
    redis = aioredis.from_url(servers.redis_url)
    await redis.delete(stream_key(EVENT))
    await redis.aclose()
    async with (
        live_app(servers.redis_url) as (base, _),
        running_command(database_url) as cmd,
        running_delivery(database_url, servers.redis_url),
    ):
        listener = asyncio.create_task(
            read_events(f"{base}/v1/events/{EVENT}/units/{unit_code}/live", 1)
        )
        await asyncio.sleep(0.3)
        answer = await cmd.submit(
            command_id="goal-1",
            code="results.set_sides",
            payload={"sides": [{"order": 1, "score": "1"}]},
            unit_id=games.units[0],
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED
        (got,) = await listener
    assert got["event"] == "unit.changed"
    assert got["data"]["unit"] == unit_code
    assert got["data"]["changes"] == [{"field": "sides[1].score", "old": None, "new": "1"}]
