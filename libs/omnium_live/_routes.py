"""The SSE routes: `/v1/events/{event}/live` and `/v1/events/{event}/units/{unit_code}/live`."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.typedefs import Handler

from omnium_live._publisher import stream_key

_EVENT = re.compile(r"^[A-Z0-9_-]{2,32}$")
_UNIT = re.compile(r"^[A-Z0-9-]{34}$")
_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
_REDIS_KEY: web.AppKey[aioredis.Redis] = web.AppKey("omnium_live_redis", aioredis.Redis)
_HEARTBEAT: web.AppKey[float] = web.AppKey("omnium_live_heartbeat", float)
Admit = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def add_live_routes(
    app: web.Application,
    redis: aioredis.Redis,
    *,
    heartbeat_seconds: float = 15.0,
    admit: Admit | None = None,
) -> None:
    """Add both live routes to `app`; `redis` is the one the delivery publisher writes to.

    `admit`, when given, runs first (the gateway's API key and rate limit): an answer from it
    is sent instead of the stream.
    """
    app[_REDIS_KEY] = redis
    app[_HEARTBEAT] = heartbeat_seconds
    handler: Handler = _live if admit is None else _admitted(admit)
    app.router.add_get("/v1/events/{event}/live", handler)
    app.router.add_get("/v1/events/{event}/units/{unit_code}/live", handler)


def _admitted(admit: Admit) -> Handler:
    async def live(request: web.Request) -> web.StreamResponse:
        refused = await admit(request)
        return refused if refused is not None else await _live(request)

    return live


def _problem(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _parse_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq)


async def _start_id(redis: aioredis.Redis, key: str, last: str | None) -> tuple[str, bool]:
    """Where to read from, and whether events the client asked for were already trimmed."""
    if last is None:
        newest: Any = await redis.xrevrange(key, count=1)
        return (_decode(newest[0][0]) if newest else "0-0"), False
    if last == "0-0":
        return last, False  # "everything still kept", asked for on purpose
    oldest: Any = await redis.xrange(key, count=1)
    gap = bool(oldest) and _parse_id(_decode(oldest[0][0])) > _next(_parse_id(last))
    return last, gap


def _next(stream_id: tuple[int, int]) -> tuple[int, int]:
    return stream_id[0], stream_id[1] + 1


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _field(fields: Any, name: str, default: str) -> str:
    """A stream entry's field, from a client that decodes responses or one that does not."""
    value = fields.get(name.encode(), fields.get(name, default))
    return _decode(value)


async def _live(request: web.Request) -> web.StreamResponse:
    event = request.match_info["event"]
    unit = request.match_info.get("unit_code")
    if not _EVENT.match(event):
        return _problem(400, f"{event[:40]!r} is not a Games code (2 to 32 of A-Z, 0-9, _ or -)")
    if unit is not None and not _UNIT.match(unit):
        return _problem(400, f"{unit[:40]!r} is not a unit code (34 of A-Z, 0-9 or -)")
    last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    if last is not None and not _STREAM_ID.match(last):
        return _problem(
            400, f"Last-Event-ID {last[:40]!r} is not an id this stream sent; reconnect without it"
        )
    redis = request.app[_REDIS_KEY]
    key = stream_key(event)
    try:
        cursor, gap = await _start_id(redis, key, last)
    except (aioredis.RedisError, OSError):
        return _problem(503, "live updates are not available right now; try again in a moment")
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    heartbeat_ms = max(1, int(request.app[_HEARTBEAT] * 1000))
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        await response.write(b"retry: 1000\n\n")
        if gap:
            # The replay buffer no longer holds what the client missed: it must read again.
            await response.write(
                b'event: gap\ndata: {"message": "some updates are no longer kept; '
                b'read the data again"}\n\n'
            )
        while True:
            try:
                found: Any = await redis.xread({key: cursor}, count=100, block=heartbeat_ms)
            except (aioredis.RedisError, OSError):
                await response.write(b'event: error\ndata: {"message": "live updates paused"}\n\n')
                await asyncio.sleep(1)
                continue
            if not found:
                await response.write(b": keepalive\n\n")
                continue
            chunks: list[bytes] = []
            for _key, entries in found:
                for entry_id, fields in entries:
                    cursor = _decode(entry_id)
                    if unit is not None and _field(fields, "unit", "") != unit:
                        continue
                    kind = _field(fields, "kind", "change")
                    data = _field(fields, "data", "{}")
                    chunks.append(f"id: {cursor}\nevent: {kind}\ndata: {data}\n\n".encode())
            if chunks:
                await response.write(b"".join(chunks))
    return response
