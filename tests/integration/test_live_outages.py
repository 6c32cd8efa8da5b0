"""Live push through quiet streams and a Redis crash: keepalives, not errors; nothing missed
unannounced."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis
from aiohttp import web

from omnium.command.v1 import command_pb2
from omnium_delivery import load_clients
from omnium_delivery._live import LivePush
from omnium_gateway import LiveRoutes
from omnium_live import add_live_routes, live_redis, stream_key
from omnium_settings import Settings
from tests.integration.test_delivery_webhook import hook_client
from tests.support.command import CommandClient, running_command
from tests.support.delivery import running_delivery
from tests.support.games import EVENT, Games, make_event, make_games
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.outage import CONNECT_RACE, crashable_redis
from tests.support.receiver import webhook_receiver
from tests.support.waiting import eventually

UNIT = "ATHM100M--------------FNL-000100--"

pytestmark = CONNECT_RACE


@dataclass(slots=True)
class Heard:
    """What one SSE client has read so far: events in order, and how many comment lines."""

    events: list[dict[str, Any]] = field(default_factory=list)
    comments: int = 0

    def kinds(self) -> list[str]:
        return [e.get("event", "message") for e in self.events]

    def scores(self) -> list[str]:
        """The new score of each `unit.changed` event heard, in order."""
        return [
            c["new"]
            for e in self.events
            if e.get("event") == "unit.changed"
            for c in e["data"]["changes"]
        ]


async def _listen(url: str, heard: Heard, headers: dict[str, str]) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.get(url, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        current: dict[str, Any] = {}
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if "data" in current:
                    heard.events.append(current)
                current = {}
            elif line.startswith(":"):
                heard.comments += 1
            else:
                name, _, value = line.partition(": ")
                if name in ("id", "event"):
                    current[name] = value
                elif name == "data":
                    current["data"] = json.loads(value)


@asynccontextmanager
async def listening(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Heard]:
    heard = Heard()
    task = asyncio.create_task(_listen(url, heard, headers or {}))
    try:
        await eventually(
            lambda: heard.comments > 0 or bool(heard.events), within=10, what="the stream to open"
        )
        yield heard
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_quiet_stream_gets_keepalives_never_errors(
    database_url: str, tmp_path: Path
) -> None:
    # A heartbeat longer than redis-py's default 5 s read timeout, which once cut every
    # quiet read short ("live updates paused" every 6 s).
    options = {"live_heartbeat_seconds": 5.5, "live_read_grace_seconds": 0.5}
    await make_event(database_url, EVENT)
    async with crashable_redis(tmp_path) as redis:
        live = LiveRoutes(gateway_settings(database_url, redis.redis_url, **options))
        async with (
            running_gateway(database_url, redis.redis_url, route_sets=[live], **options) as gw,
            listening(f"{gw.url}/v1/events/{EVENT}/live") as heard,
        ):
            opened = heard.comments
            await asyncio.sleep(7.5)  # past the heartbeat and past the read timeout
    assert heard.events == []  # no `error`, nor anything else
    assert heard.comments > opened


@asynccontextmanager
async def live_server(settings: Settings) -> AsyncIterator[str]:
    """The live routes alone, wired as the gateway wires them (its relay and cache are tested
    elsewhere)."""
    assert settings.server.redis_url is not None
    redis = live_redis(
        settings.server.redis_url,
        heartbeat_seconds=settings.live.heartbeat_seconds,
        grace_seconds=settings.live.read_grace_seconds,
        max_connections=settings.live.redis_connections,
    )
    app = web.Application()
    add_live_routes(
        app,
        redis,
        heartbeat_seconds=settings.live.heartbeat_seconds,
        retry_seconds=settings.live.retry_seconds,
    )
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
        await redis.aclose()


async def _save_score(command: CommandClient, games: Games, n: int) -> None:
    answer = await command.submit(
        command_id=f"outage-goal-{n}",
        code="results.set_sides",
        payload={"sides": [{"order": 1, "score": str(n)}]},
        unit_id=games.units[0],
    )
    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED


async def test_after_a_redis_crash_listeners_learn_what_they_missed(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=1)
    quick = {
        "live_heartbeat_seconds": 0.5,
        "live_read_grace_seconds": 0.5,
        "live_retry_seconds": 0.2,
    }
    async with (
        crashable_redis(tmp_path) as redis,
        webhook_receiver() as receiver,
    ):
        client = hook_client("results-hook", receiver.url, receiver.secret)
        await load_clients(db, [client | {"feeds": [{"kind": "results", "format": "json"}]}])
        async with (
            running_command(database_url) as command,
            running_delivery(
                database_url, redis.redis_url, delivery_poll_seconds=0.2, **quick
            ) as delivery,
            live_server(Settings.from_env({}, redis_url=redis.redis_url, **quick)) as base,
        ):
            url = f"{base}/v1/events/{EVENT}/live"
            async with listening(url) as connected:
                await _save_score(command, games, 1)
                await eventually(
                    lambda: connected.scores() == ["1"], within=10, what="the first change"
                )
                seen_id = connected.events[-1]["id"]

                await redis.crash()
                await eventually(
                    lambda: "error" in connected.kinds(), within=10, what="live updates paused"
                )
                sends = len(receiver.got)
                await _save_score(command, games, 2)
                await _save_score(command, games, 3)
                # Feeds and files do not wait for Redis.
                await eventually(
                    lambda: len(receiver.got) > sends, within=15, what="a webhook send"
                )

                await redis.start()  # empty: Redis keeps nothing on disk here
                await eventually(
                    lambda: connected.scores()[-2:] == ["2", "3"], within=30, what="the replay"
                )
                after_crash = connected.kinds()[connected.kinds().index("error") :]
                assert "gap" in after_crash
                assert after_crash.index("gap") < len(after_crash) - 2  # before the replay

                # A client that saw only the first change reconnects with its id: that id is
                # from before the restart, so it hears of the gap, then what is kept.
                async with listening(url, {"Last-Event-ID": seen_id}) as back:
                    await eventually(
                        lambda: back.scores() == ["2", "3"], within=10, what="the resumed stream"
                    )
                    assert back.kinds()[0] == "gap"
                    await _save_score(command, games, 4)
                    await eventually(
                        lambda: back.scores()[-1:] == ["4"], within=10, what="live push again"
                    )
                    await eventually(
                        lambda: connected.scores()[-1:] == ["4"], within=10, what="live push again"
                    )
            assert delivery.app.live is not None and delivery.app.live.backlog == 0


def _row(n: int) -> dict[str, Any]:
    """An outbox row as delivery reads it."""
    return {
        "id": n,
        "event_code": EVENT,
        "kind": "unit.changed",
        "subject_kind": "unit",
        "payload": {"code": UNIT, "changes": [{"field": "sides[1].score", "new": str(n)}]},
        "saved_at": datetime.now(UTC),
        "held": False,
        "trace_context": None,
    }


async def test_a_backlog_too_long_for_redis_ends_in_a_gap(tmp_path: Path) -> None:
    settings = Settings.from_env({}, live_backlog_length=2, live_retry_seconds=0.1)
    async with crashable_redis(tmp_path) as redis:
        client = aioredis.from_url(redis.redis_url, socket_timeout=1, socket_connect_timeout=1)
        push = LivePush(settings, client)
        stopping = asyncio.Event()
        publishing = asyncio.create_task(push.run(stopping))
        try:
            await redis.crash()
            push.add([_row(n) for n in range(1, 6)])
            await asyncio.sleep(0.5)  # tried, and failed, meanwhile
            assert push.backlog == 2
            await redis.start()
            await eventually(
                lambda: push.backlog == 0 and not push.lost, within=15, what="the backlog sent"
            )
            entries = await client.xrange(stream_key(EVENT))
        finally:
            stopping.set()
            await publishing
            await client.aclose()
    kinds = [fields[b"kind"].decode() for _, fields in entries]
    assert kinds == ["gap", "unit.changed", "unit.changed"]
    assert json.loads(entries[0][1][b"data"])["lost"] == 3
    assert [json.loads(f[b"data"])["id"] for _, f in entries[1:]] == [4, 5]
