"""A gateway told to stop (SIGTERM, real processes) with a live stream open: it exits within
seconds, the stream ends cleanly with a reconnect hint, and the client, reconnecting to another
gateway with its Last-Event-ID, misses nothing saved meanwhile. A worker that gives up waiting
for its relay to stop leaves no Redis connection open."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
import time
import uuid
import warnings
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from omnium_db import NotifyListener
from omnium_gateway import _gateway
from omnium_live import LivePublisher
from tests.support.games import make_event
from tests.support.gateway import gateway_process, running_gateway
from tests.support.servers import Servers

# The default heartbeat (15 s): a quiet stream's read blocks that long, as in production.
SETTINGS = {"gateway_workers": "2", "gateway_anonymous_reads": "true"}


def _change(n: int) -> dict[str, Any]:
    return {"id": n, "kind": "unit_changed", "code": f"U{n}", "changes": []}


async def _read(
    response: aiohttp.ClientResponse, until: int | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Events (id and data) and the other lines, until `until` events or the end of the stream.
    An end that is not clean (a reset, a cut chunk) raises here."""
    events: list[dict[str, Any]] = []
    lines: list[str] = []
    current: dict[str, Any] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if "data" in current:
                events.append(current)
                if until is not None and len(events) == until:
                    break
            current = {}
            continue
        field, _, value = line.partition(": ")
        if field == "id":
            current["id"] = value
        elif field == "data":
            current["data"] = json.loads(value)
        else:
            lines.append(line)
    return events, lines


async def test_a_stopping_gateway_ends_its_streams_and_another_carries_on(
    servers: Servers, database_url: str
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    await make_event(database_url, event)
    redis = aioredis.from_url(servers.redis_url)
    publisher = LivePublisher(redis, max_length=100)
    try:
        with (
            gateway_process(database_url, servers.redis_url, **SETTINGS) as first,
            gateway_process(database_url, servers.redis_url, **SETTINGS) as second,
        ):
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                async with http.get(f"{first.url}/v1/events/{event}/live") as stream:
                    assert stream.status == 200
                    await asyncio.sleep(0.3)  # the stream reads from "now"
                    await publisher.publish(event, [_change(1), _change(2)])
                    async with asyncio.timeout(10):
                        before, _ = await _read(stream, until=2)
                    first.process.send_signal(signal.SIGTERM)
                    signalled = time.monotonic()
                    async with asyncio.timeout(10):
                        after, lines = await _read(stream, until=None)
                    ended_after = time.monotonic() - signalled
                    # Saved while the client is between copies.
                    await publisher.publish(event, [_change(3), _change(4)])
                exited = await asyncio.to_thread(first.process.wait, 10)
                stopped_after = time.monotonic() - signalled
                last_id = before[-1]["id"]
                resume = {"Last-Event-ID": last_id}
                async with http.get(
                    f"{second.url}/v1/events/{event}/live", headers=resume
                ) as again:
                    assert again.status == 200
                    async with asyncio.timeout(10):
                        resumed, _ = await _read(again, until=2)
    finally:
        await redis.aclose()
    assert [e["data"]["id"] for e in before] == [1, 2]
    assert after == []
    assert ended_after < 5
    assert any(line.startswith("retry: ") for line in lines), lines
    assert any("stopping" in line for line in lines), lines
    assert exited == 0 and stopped_after < 5
    assert [e["data"]["id"] for e in resumed] == [3, 4]


async def _gateway_connections(redis: aioredis.Redis) -> int:
    clients = await redis.client_list()
    return sum(1 for c in clients if c.get("name", "").startswith("omnium-gateway"))


async def test_a_worker_that_stops_before_its_relay_leaves_no_redis_connection_open(
    servers: Servers,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The relay's stop is made slow (its PostgreSQL listener takes half a second to close) and
    # the worker waits a tenth of that: the worker closes its connections while the relay is
    # still stopping, and the relay then releases its Redis lease. Sharing the worker's pool,
    # that last call opened a connection nobody closed (and redis-py, closing a pool under a
    # connection being opened, can drop a socket unclosed, which failed later tests at random).
    close = NotifyListener.close

    async def slow_close(self: NotifyListener) -> None:
        await asyncio.sleep(0.5)
        await close(self)

    monkeypatch.setattr(NotifyListener, "close", slow_close)
    monkeypatch.setattr(_gateway, "STOP_PART_SECONDS", 0.1)
    # What earlier tests of the session left to the garbage collector goes first, unreported
    # here: the collection below must find only what this stop left.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    caplog.set_level(logging.WARNING, logger="omnium_gateway")
    redis = aioredis.from_url(servers.redis_url)
    try:
        before = await _gateway_connections(redis)
        async with running_gateway(database_url, servers.redis_url) as gw:
            await gw.get("/v1/events")
            assert await _gateway_connections(redis) > before
            relay = next(t for t in gw.gateway.tasks if t.get_name() == "outbox relay")
        # The worker has stopped; its relay has not.
        assert not relay.done()
        async with asyncio.timeout(10):
            await asyncio.wait([relay])
        gc.collect()  # a socket dropped unclosed would warn (and fail this test) here
        assert await _gateway_connections(redis) == before
        said = [r.getMessage() for r in caplog.records if r.name == "omnium_gateway._gateway"]
        assert any("outbox relay still stopping" in m for m in said), said
    finally:
        await redis.aclose()
