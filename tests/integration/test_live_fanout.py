"""Live push at fan scale: one reader per stream fanned out to every listener, slow listeners
dropped with a gap, a cap per worker, and every listener back after a Redis restart."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from omnium_gateway import LiveRoutes
from omnium_live import LiveHub, LivePublisher, add_live_routes, live_hub, live_redis
from tests.support.games import make_event
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.outage import CONNECT_RACE, crashable_redis
from tests.support.servers import Servers
from tests.support.sse import reading
from tests.support.waiting import eventually

UNIT_A = "ATHM100M--------------FNL-000100--"
UNIT_B = "ATHM200M--------------FNL-000100--"

pytestmark = CONNECT_RACE


@dataclass(slots=True)
class Heard:
    """What one SSE client has read: its events in order, and whether the stream ended."""

    events: list[dict[str, Any]] = field(default_factory=list)
    opened: bool = False
    ended: bool = False

    def kinds(self) -> list[str]:
        return [e.get("event", "message") for e in self.events]

    def numbers(self) -> list[int]:
        return [e["data"]["n"] for e in self.events if "n" in e.get("data", {})]


def _parse(text: str, heard: Heard) -> None:
    """Whole SSE messages (separated by a blank line) into `heard`."""
    current: dict[str, Any] = {}
    for line in text.split("\n"):
        if line.startswith(":") or line.startswith("retry:"):
            heard.opened = True
            continue
        name, _, value = line.partition(": ")
        if name in ("id", "event"):
            current[name] = value
        elif name == "data":
            current["data"] = json.loads(value)
    if "data" in current:
        heard.events.append(current)


async def _listen(
    http: aiohttp.ClientSession, url: str, heard: Heard, headers: dict[str, str]
) -> None:
    async with http.get(url, headers=headers) as response:
        assert response.status == 200, await response.text()
        buffer = ""
        async for chunk in response.content.iter_any():
            buffer += chunk.decode()
            while "\n\n" in buffer:
                message, buffer = buffer.split("\n\n", 1)
                _parse(message, heard)
    heard.ended = True


@asynccontextmanager
async def listeners(
    urls: list[str], headers: dict[str, str] | None = None
) -> AsyncIterator[list[Heard]]:
    """One SSE client per url, all open (their `retry:` line read) before this yields."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        heard = [Heard() for _ in urls]
        tasks = [
            asyncio.create_task(_listen(http, url, h, headers or {}))
            for url, h in zip(urls, heard, strict=True)
        ]

        async def all_open() -> bool:
            for task in tasks:
                if task.done():
                    task.result()  # a refused stream fails here, with its answer
            return all(h.opened for h in heard)

        try:
            await eventually(all_open, within=30, what="every stream to open")
            yield heard
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(slots=True)
class LiveApp:
    url: str
    hub: LiveHub
    client_name: str


@asynccontextmanager
async def live_app(redis_url: str, **options: Any) -> AsyncIterator[LiveApp]:
    """The live routes alone on one aiohttp app (one worker), wired as the gateway wires them.
    Its Redis client carries a name of its own, so the test can count its connections."""
    heartbeat = options.pop("heartbeat_seconds", 1.0)
    connections = options.pop("redis_connections", 20)
    redis = live_redis(
        redis_url, heartbeat_seconds=heartbeat, grace_seconds=1.0, max_connections=connections
    )
    name = f"live-{uuid.uuid4().hex[:8]}"
    redis.connection_pool.connection_kwargs["client_name"] = name
    app = web.Application()
    add_live_routes(app, redis, heartbeat_seconds=heartbeat, **options)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield LiveApp(f"http://127.0.0.1:{runner.addresses[0][1]}", live_hub(app), name)
    finally:
        await runner.cleanup()
        await redis.aclose()


async def connections_named(redis: aioredis.Redis, name: str) -> int:
    clients: Any = await redis.client_list()
    return sum(1 for c in clients if c.get("name") == name)


def _event_code() -> str:
    return f"T{uuid.uuid4().hex[:8].upper()}"


async def _burst_heard(
    publisher: LivePublisher,
    event: str,
    heard: list[Heard],
    size: int,
    *,
    games_fans: int,
    within: float,
) -> list[str]:
    """Publish `size` changes alternating between unit A (odd) and B (even); every Games fan
    (the first `games_fans` of `heard`) hears them all, every unit-A fan the odd ones, in order.
    Returns the entries' ids."""
    burst = [
        {"kind": "unit.changed", "unit": UNIT_A if n % 2 else UNIT_B, "n": n} for n in range(size)
    ]
    ids = await publisher.publish(event, burst)
    everything = list(range(size))
    only_a = [n for n in everything if n % 2]

    async def all_heard() -> bool:
        return all(
            len(h.events) == (size if i < games_fans else size // 2) for i, h in enumerate(heard)
        )

    await eventually(all_heard, within=within, what="every listener to hear the burst")
    for i, h in enumerate(heard):
        assert h.numbers() == (everything if i < games_fans else only_a), i
    return ids


async def test_300_listeners_on_one_worker_hear_every_event_of_a_burst(servers: Servers) -> None:
    event = _event_code()
    redis = aioredis.from_url(servers.redis_url)
    publisher = LivePublisher(redis, max_length=1000)
    try:
        async with live_app(servers.redis_url) as live:
            base, hub, name = live.url, live.hub, live.client_name
            urls = [f"{base}/v1/events/{event}/live"] * 200
            urls += [f"{base}/v1/events/{event}/units/{UNIT_A}/live"] * 100
            async with listeners(urls) as heard:
                assert hub.count == 300
                await reading(hub, event)
                ids = await _burst_heard(publisher, event, heard, 300, games_fans=200, within=60)
                # One reader for the stream, however many listen: a handful of connections.
                assert await connections_named(redis, name) <= 2
                # A client joining late with the id of event 149 gets the rest, once each.
                async with listeners(urls[:1], {"Last-Event-ID": ids[149]}) as (late,):

                    async def rest_heard() -> bool:
                        return len(late.events) >= 150

                    await eventually(rest_heard, within=30, what="the replay")
                    await publisher.publish(event, [{"kind": "unit.changed", "n": 300}])
                    await eventually(
                        lambda: _true(late.numbers()[-1:] == [300]), what="live after replay"
                    )
                    assert late.numbers() == list(range(150, 301))
            assert hub.dropped == 0
        await eventually(lambda: _true(hub.count == 0), within=10, what="every listener gone")
    finally:
        await redis.aclose()


async def _true(value: bool) -> bool:
    return value


async def _slow_client(url: str) -> socket.socket:
    """An SSE client that asks, then reads nothing: a tiny receive buffer fills at once."""
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    path = "/" + url.split("/", 3)[3]
    await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return sock


async def _read_to_end(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    body = b""
    async with asyncio.timeout(30):
        while not body.endswith(b"\r\n0\r\n\r\n"):
            chunk = await loop.sock_recv(sock, 1 << 20)
            if not chunk:
                break
            body += chunk
    return body


def _dechunk(raw: bytes) -> str:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:100]
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return text.decode()
        text += rest[:size]
        body = rest[size + 2 :]
    raise AssertionError("the stream did not end with its last chunk")


async def test_a_slow_listener_gets_a_gap_and_is_closed_while_the_others_carry_on(
    servers: Servers,
) -> None:
    event = _event_code()
    redis = aioredis.from_url(servers.redis_url)
    publisher = LivePublisher(redis, max_length=10_000)
    padding = "x" * 32_000
    published: list[str] = []
    try:
        async with live_app(servers.redis_url, listener_queue=8) as live:
            base, hub = live.url, live.hub
            url = f"{base}/v1/events/{event}/live"
            async with listeners([url] * 5) as fast:
                slow = await _slow_client(url)
                try:
                    await eventually(lambda: _true(hub.count == 6), what="the slow client in")

                    async def dropped() -> bool:
                        # Enough to fill every buffer between the server and the slow client.
                        items = [
                            {"kind": "unit.changed", "n": len(published) + i, "pad": padding}
                            for i in range(10)
                        ]
                        published.extend(await publisher.publish(event, items))
                        return hub.dropped == 1 or len(published) > 3000

                    await eventually(dropped, within=60, what="the slow listener dropped")
                    assert hub.dropped == 1
                    assert hub.count == 5

                    async def all_heard() -> bool:
                        return all(len(h.events) == len(published) for h in fast)

                    await eventually(all_heard, within=60, what="the others to hear everything")
                    for h in fast:
                        assert h.numbers() == list(range(len(published)))
                        assert not h.ended
                    text = _dechunk(await _read_to_end(slow))
                finally:
                    slow.close()
            heard = Heard()
            for message in text.split("\n\n"):
                _parse(message, heard)
            # Whatever it read came in order, then the gap, then the end of the stream.
            assert heard.kinds()[-1] == "gap"
            assert "too far behind" in heard.events[-1]["data"]["message"]
            assert "id" not in heard.events[-1]
            got = heard.numbers()
            assert got == list(range(len(got))) and len(got) < len(published)
            # Reconnecting with the last id it was sent resumes where it left off.
            last_id = heard.events[-2]["id"] if len(heard.events) > 1 else "0-0"
            async with listeners([url], {"Last-Event-ID": last_id}) as (back,):

                async def caught_up() -> bool:
                    return len(back.events) >= len(published) - len(got)

                await eventually(caught_up, within=30, what="the reconnect to catch up")
                assert back.numbers() == list(range(len(got), len(published)))
    finally:
        await redis.aclose()


async def test_past_the_cap_a_stream_is_refused_with_503_and_retry_after(
    database_url: str, servers: Servers
) -> None:
    event = _event_code()
    await make_event(database_url, event, [UNIT_A])
    options = {
        "live_max_streams": 3,
        "live_heartbeat_seconds": 1.0,
        "gateway_public_metrics": True,
    }
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with running_gateway(database_url, servers.redis_url, route_sets=[live], **options) as gw:
        url = f"{gw.url}/v1/events/{event}/live"
        async with listeners([url] * 2) as _, listeners([url]) as _:
            refused = await gw.get(f"/v1/events/{event}/units/{UNIT_A}/live")
            assert refused.status_code == 503
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert "most live streams" in refused.json()["error"]
            metrics = (await gw.get("/metrics")).text
            assert "omnium_gateway_live_listeners 3" in metrics
            assert "omnium_gateway_live_refused_total 1" in metrics

        # A stream its client closed frees its place (noticed at its next keepalive at most).
        async def a_place_again() -> bool:
            return (await gw.get("/metrics")).text.count("omnium_gateway_live_listeners 0") == 1

        await eventually(a_place_again, within=10, what="the closed streams to leave")
        async with listeners([url]) as (heard,):
            assert heard.opened


async def test_made_up_games_get_404_and_take_no_reader_from_the_real_games_fans(
    database_url: str, servers: Servers
) -> None:
    event, other = _event_code(), _event_code()
    await make_event(database_url, event, [UNIT_A])
    await make_event(database_url, other)
    # Room for one Games' reader beside the replays: a made-up code that took it would leave
    # the real Games' fans with nothing.
    options = {
        "live_redis_connections": 5,
        "live_heartbeat_seconds": 1.0,
        "gateway_anonymous_burst": 1000,
        # Every listener here comes from the test's one address.
        "live_max_streams_per_client": 0,
    }
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    redis = aioredis.from_url(servers.redis_url)
    publisher = LivePublisher(redis, max_length=1000)
    try:
        async with running_gateway(
            database_url, servers.redis_url, route_sets=[live], **options
        ) as gw:
            hub = live_hub(gw.app)
            made_up = [_event_code() for _ in range(150)]
            answers = await asyncio.gather(*(gw.get(f"/v1/events/{c}/live") for c in made_up))
            assert [a.status_code for a in answers] == [404] * 150
            assert answers[0].json()["error"] == f"There is no event {made_up[0]}."
            no_unit = await gw.get(f"/v1/events/{event}/units/{UNIT_B}/live")
            assert no_unit.status_code == 404
            assert no_unit.json()["error"] == f"There is no unit {UNIT_B} in event {event}."
            assert hub.readers == {} and hub.count == 0

            base = f"{gw.url}/v1/events/{event}"
            urls = [f"{base}/live"] * 20 + [f"{base}/units/{UNIT_A}/live"] * 10
            async with listeners(urls) as heard:
                assert list(hub.readers) == [event]
                await reading(hub, event)
                # A second real Games finds every reader's connection taken: a plain 503,
                # while the first Games' fans carry on.
                refused = await gw.get(f"/v1/events/{other}/live")
                assert refused.status_code == 503
                assert 1 <= int(refused.headers["Retry-After"]) <= 60
                assert "most Games at once (1)" in refused.json()["error"]

                ids = await _burst_heard(publisher, event, heard, 100, games_fans=20, within=30)
                # Reconnects replay from the stream on the pool's other connections.
                async with listeners(urls[:10], {"Last-Event-ID": ids[49]}) as back:

                    async def replayed() -> bool:
                        return all(len(h.events) == 50 for h in back)

                    await eventually(replayed, within=30, what="every replay")
                    assert all(h.numbers() == list(range(50, 100)) for h in back)
            assert hub.dropped == 0
    finally:
        await redis.aclose()


async def test_readers_and_replays_stay_within_the_live_pool(servers: Servers) -> None:
    event, other = _event_code(), _event_code()
    redis = aioredis.from_url(servers.redis_url)
    publisher = LivePublisher(redis, max_length=1000)
    try:
        async with live_app(servers.redis_url, redis_connections=5) as live:
            base, hub, name = live.url, live.hub, live.client_name
            url = f"{base}/v1/events/{event}/live"
            async with listeners([url] * 10) as heard, aiohttp.ClientSession() as http:
                async with http.get(f"{base}/v1/events/{other}/live") as refused:
                    assert refused.status == 503
                    assert "Retry-After" in refused.headers
                await reading(hub, event)
                ids = await publisher.publish(
                    event, [{"kind": "unit.changed", "n": n} for n in range(40)]
                )
                await eventually(
                    lambda: _true(all(h.numbers() == list(range(40)) for h in heard)),
                    what="every listener to hear the changes",
                )
                # Thirty reconnects at once: four replay at a time, the others wait their turn
                # for a connection, none fails.
                async with listeners([url] * 30, {"Last-Event-ID": ids[9]}) as back:

                    async def replayed() -> bool:
                        return all(len(h.events) == 30 for h in back)

                    await eventually(replayed, within=30, what="every replay")
                    assert all(h.numbers() == list(range(10, 40)) for h in back)
                    assert all("error" not in h.kinds() for h in back)
                assert await connections_named(redis, name) <= 5
            assert len(hub.readers) <= 1
    finally:
        await redis.aclose()


async def test_after_a_redis_restart_every_listener_resumes_told_of_the_gap(
    tmp_path: Path,
) -> None:
    event = _event_code()
    async with crashable_redis(tmp_path) as server:
        options = {"heartbeat_seconds": 0.5, "retry_seconds": 0.2}
        async with live_app(server.redis_url, **options) as live:
            base, hub, name = live.url, live.hub, live.client_name
            urls = [f"{base}/v1/events/{event}/live"] * 20
            urls += [f"{base}/v1/events/{event}/units/{UNIT_A}/live"] * 20
            async with listeners(urls) as heard:
                await reading(hub, event)
                redis = aioredis.from_url(server.redis_url, socket_timeout=2)
                try:
                    await LivePublisher(redis, max_length=100).publish(
                        event, [{"kind": "unit.changed", "unit": UNIT_A, "n": n} for n in (1, 2)]
                    )
                    await eventually(
                        lambda: _true(all(h.numbers() == [1, 2] for h in heard)),
                        what="the first changes",
                    )
                finally:
                    await redis.aclose()

                await server.crash()
                await eventually(
                    lambda: _true(all("error" in h.kinds() for h in heard)),
                    what="every listener told live updates paused",
                )
                await server.start()  # empty: Redis keeps nothing on disk here
                redis = aioredis.from_url(server.redis_url, socket_timeout=2)
                try:
                    await eventually(
                        lambda: _true(all(h.kinds()[-1:] == ["gap"] for h in heard)),
                        what="every listener told of the gap",
                    )
                    await LivePublisher(redis, max_length=100).publish(
                        event, [{"kind": "unit.changed", "unit": UNIT_A, "n": n} for n in (3, 4)]
                    )
                    await eventually(
                        lambda: _true(all(h.numbers() == [1, 2, 3, 4] for h in heard)),
                        what="every listener to resume",
                    )
                    for h in heard:
                        after = h.kinds()[h.kinds().index("error") :]
                        assert after == ["error", "gap", "unit.changed", "unit.changed"]
                    assert await connections_named(redis, name) <= 2
                finally:
                    await redis.aclose()
            assert hub.dropped == 0


async def _cut_connections(redis: aioredis.Redis, name: str) -> None:
    """A brief network drop: Redis closes every connection of the client named `name`."""
    clients: Any = await redis.client_list()
    for client in clients:
        if client.get("name") == name:
            await redis.client_kill_filter(_id=client["id"])


@pytest.mark.parametrize("outage", ["restarted_with_its_data", "connections_cut"])
async def test_when_redis_keeps_the_stream_listeners_get_what_they_missed_and_no_gap(
    tmp_path: Path, outage: str
) -> None:
    event = _event_code()
    async with crashable_redis(tmp_path) as server:
        options = {"heartbeat_seconds": 0.5, "retry_seconds": 1.0}
        async with live_app(server.redis_url, **options) as live:
            base, hub, name = live.url, live.hub, live.client_name
            urls = [f"{base}/v1/events/{event}/live"] * 20
            urls += [f"{base}/v1/events/{event}/units/{UNIT_A}/live"] * 20
            async with listeners(urls) as heard:
                await reading(hub, event)
                redis = aioredis.from_url(server.redis_url, socket_timeout=2)
                publisher = LivePublisher(redis, max_length=100)
                try:
                    ids = await publisher.publish(
                        event, [{"kind": "unit.changed", "unit": UNIT_A, "n": n} for n in (1, 2)]
                    )
                    await eventually(
                        lambda: _true(all(h.numbers() == [1, 2] for h in heard)),
                        what="the first changes",
                    )
                    if outage == "restarted_with_its_data":
                        await redis.aclose()
                        await server.restart_with_its_data()
                        redis = aioredis.from_url(server.redis_url, socket_timeout=2)
                        publisher = LivePublisher(redis, max_length=100)
                    else:
                        await _cut_connections(redis, name)
                    # Saved while the reader waits to try Redis again (a second): it must pick
                    # them up from where it was, not from the stream's new end.
                    await publisher.publish(
                        event, [{"kind": "unit.changed", "unit": UNIT_A, "n": n} for n in (3, 4)]
                    )
                    await eventually(
                        lambda: _true(all(h.numbers() == [1, 2, 3, 4] for h in heard)),
                        what="every listener to get what it missed",
                    )
                    for h in heard:
                        assert "gap" not in h.kinds()
                        after = h.kinds()[h.kinds().index("error") :]
                        assert after == ["error", "unit.changed", "unit.changed"]
                    # A client that saw only the first change before the outage reconnects
                    # with its id: the stream still holds it, so the rest comes with no gap.
                    async with listeners(urls[:1], {"Last-Event-ID": ids[0]}) as (back,):
                        await eventually(
                            lambda: _true(back.numbers() == [2, 3, 4]), what="the replay"
                        )
                        assert "gap" not in back.kinds()
                    assert await connections_named(redis, name) <= 2
                finally:
                    await redis.aclose()
            assert hub.dropped == 0
