"""A gateway told to stop (SIGTERM, real processes) with a live stream open: it exits within
seconds, the stream ends cleanly with a reconnect hint, and the client, reconnecting to another
gateway with its Last-Event-ID, misses nothing saved meanwhile."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from omnium_live import LivePublisher
from tests.support.games import make_event
from tests.support.gateway import gateway_process
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
