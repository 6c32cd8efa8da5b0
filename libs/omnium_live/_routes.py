"""The SSE routes: `/v1/events/{event}/live` and `/v1/events/{event}/units/{unit_code}/live`."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.typedefs import Handler
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from omnium_live._publisher import stream_key

_EVENT = re.compile(r"^[A-Z0-9_-]{2,32}$")
_UNIT = re.compile(r"^[A-Z0-9-]{34}$")
_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
_REDIS_KEY: web.AppKey[aioredis.Redis] = web.AppKey("omnium_live_redis", aioredis.Redis)
_HEARTBEAT: web.AppKey[float] = web.AppKey("omnium_live_heartbeat", float)
_RETRY: web.AppKey[float] = web.AppKey("omnium_live_retry", float)
_STOPPING: web.AppKey[asyncio.Event] = web.AppKey("omnium_live_stopping", asyncio.Event)
# What Redis raises when it, not the caller, is the trouble (timeouts are OSErrors).
REDIS_ERRORS: tuple[type[BaseException], ...] = (aioredis.RedisError, OSError)
_GAP = (
    b'event: gap\ndata: {"message": "some updates may be missing from this stream; '
    b'read the data again from the API"}\n\n'
)
_PAUSED = b'event: error\ndata: {"message": "live updates paused; they resume by themselves"}\n\n'
Admit = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
_T = TypeVar("_T")


class _Stopping(Exception):
    """The server is stopping: the stream ends so its client reconnects to another copy."""


def live_redis(redis_url: str, *, heartbeat_seconds: float, grace_seconds: float) -> aioredis.Redis:
    """A Redis client for the stream readers.

    A read blocks for up to a heartbeat, so the socket waits that long and `grace_seconds`
    more: a quiet stream is not a Redis that stopped answering. redis-py does not retry by
    itself, so a failure reaches the route, which then checks the stream's continuity.
    """
    return aioredis.from_url(
        redis_url,
        socket_timeout=heartbeat_seconds + grace_seconds,
        socket_connect_timeout=grace_seconds,
        retry=Retry(NoBackoff(), 0),
    )


def add_live_routes(
    app: web.Application,
    redis: aioredis.Redis,
    *,
    heartbeat_seconds: float = 15.0,
    retry_seconds: float = 1.0,
    admit: Admit | None = None,
) -> None:
    """Add both live routes to `app`; `redis` is the one the delivery publisher writes to
    (made with `live_redis`, or any client whose reads outlast a heartbeat).

    `admit`, when given, runs first (the gateway's API key and rate limit): an answer from it
    is sent instead of the stream.

    When the app shuts down, every stream ends at once with a `retry:` hint: the browser's
    EventSource reconnects (to another copy behind the load balancer) with its Last-Event-ID
    and misses nothing. Without this aiohttp's shutdown would wait for streams that never end.
    """
    read_timeout = redis.connection_pool.connection_kwargs.get("socket_timeout")
    if read_timeout is not None and read_timeout <= heartbeat_seconds:
        raise ValueError(
            f"the live routes' Redis client gives up on a read after {read_timeout} s, but a "
            f"quiet stream's read waits {heartbeat_seconds} s (the heartbeat), so every quiet "
            "stream would report an error; make the client with live_redis()"
        )
    app[_REDIS_KEY] = redis
    app[_HEARTBEAT] = heartbeat_seconds
    app[_RETRY] = retry_seconds
    app[_STOPPING] = asyncio.Event()

    async def end_streams(app: web.Application) -> None:
        app[_STOPPING].set()

    app.on_shutdown.append(end_streams)
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


async def _start_id(redis: aioredis.Redis, key: str, last: str | None) -> tuple[str, bool]:
    """Where to read from, and whether the client may have missed something."""
    if last is None:
        newest: Any = await redis.xrevrange(key, count=1)
        return (_decode(newest[0][0]) if newest else "0-0"), False
    if last == "0-0":
        return last, False  # "everything still kept", asked for on purpose
    return await _resume_id(redis, key, last)


async def _resume_id(redis: aioredis.Redis, key: str, cursor: str | None) -> tuple[str, bool]:
    """Carry on after `cursor` when the stream still holds that entry: trimming only drops the
    oldest, so everything after it is there too. Otherwise continuity is lost (trimmed past it,
    or Redis restarted with an empty stream whose ids start again, maybe below the cursor): a
    gap, then everything still kept. None: the client asked for "from now" while Redis was
    down, so what was saved meanwhile is unknown to it."""
    if cursor is None:
        newest, _ = await _start_id(redis, key, None)
        return newest, True
    if cursor != "0-0":
        kept: Any = await redis.xrange(key, min=cursor, max=cursor, count=1)
        if kept:
            return cursor, False
    return "0-0", True


async def _unless_stopping(stopping: asyncio.Event, work: Awaitable[_T]) -> _T:
    """`work`'s answer; _Stopping (and `work` cancelled) when the server stops first.

    A read cut short sent nothing, so the client's Last-Event-ID still says where to resume.
    """
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        if not stopping.is_set():
            await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *REDIS_ERRORS):
                await task
    if task.cancelled():
        raise _Stopping
    return task.result()


def _goodbye() -> bytes:
    """The last lines of a stream whose server stops: reconnect soon, each client at its own
    moment within a second, so the copies left are not all hit in the same instant."""
    retry_ms = random.randint(250, 1250)
    return (
        f": this server is stopping; reconnect with Last-Event-ID\nretry: {retry_ms}\n\n".encode()
    )


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
    paused = False
    try:
        cursor, gap = await _start_id(redis, key, last)
    except REDIS_ERRORS:
        # Open the stream anyway, paused: a browser's EventSource gives up for good on a 503.
        start, gap, paused = last, False, True
    else:
        start = cursor
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    heartbeat_ms = max(1, int(request.app[_HEARTBEAT] * 1000))
    retry_seconds = request.app[_RETRY]
    stopping = request.app[_STOPPING]
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        await response.write(b"retry: 1000\n\n")
        if paused or gap:
            await response.write(_PAUSED if paused else _GAP)
        try:
            while True:
                try:
                    if paused:
                        # Redis answers again, but it may have restarted empty meanwhile.
                        cursor, gap = await _unless_stopping(
                            stopping, _resume_id(redis, key, start)
                        )
                        paused = False
                        if gap:
                            await response.write(_GAP)
                    found: Any = await _unless_stopping(
                        stopping, redis.xread({key: cursor}, count=100, block=heartbeat_ms)
                    )
                except REDIS_ERRORS:
                    # Said once per outage; comments meanwhile keep proxies from closing it.
                    await response.write(b": waiting for redis\n\n" if paused else _PAUSED)
                    if not paused:
                        start, paused = cursor, True
                    await _unless_stopping(stopping, asyncio.sleep(retry_seconds))
                    continue
                if not found:
                    await response.write(b": keepalive\n\n")
                    continue
                chunks: list[bytes] = []
                for _key, entries in found:
                    for entry_id, fields in entries:
                        cursor = _decode(entry_id)
                        kind = _field(fields, "kind", "change")
                        # A gap the publisher wrote (it had to drop changes) concerns every unit.
                        if (
                            unit is not None
                            and kind != "gap"
                            and _field(fields, "unit", "") != unit
                        ):
                            continue
                        data = _field(fields, "data", "{}")
                        chunks.append(f"id: {cursor}\nevent: {kind}\ndata: {data}\n\n".encode())
                if chunks:
                    await response.write(b"".join(chunks))
        except _Stopping:
            # The handler returns, so aiohttp ends the chunked body properly: the client sees
            # the stream end, not a reset, and reconnects after the hint.
            await response.write(_goodbye())
    return response
