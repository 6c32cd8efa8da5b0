"""The SSE routes: `/v1/events/{event}/live` and `/v1/events/{event}/units/{unit_code}/live`."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.typedefs import Handler
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from omnium_live._hub import (
    REDIS_ERRORS,
    REPLAYS_AT_ONCE,
    ClientFull,
    Full,
    Item,
    Listener,
    LiveCounters,
    LiveHub,
    ReadersFull,
    Signal,
    decode,
    id_number,
    render,
)

__all__ = ["LIVE_ROUTES", "REDIS_ERRORS", "Known", "Owner", "add_live_routes", "live_redis"]

# The two routes, as the router names them.
LIVE_ROUTES = frozenset({"/v1/events/{event}/live", "/v1/events/{event}/units/{unit_code}/live"})

_EVENT = re.compile(r"^[A-Z0-9_-]{2,32}$")
_UNIT = re.compile(r"^[A-Z0-9-]{34}$")
# A Redis stream id, "<ms>-<seq>", or "<ms>" alone (Redis reads it as "<ms>-0"). 19 digits
# each at most, so every id that matches is one Redis takes (below 2^64).
STREAM_ID_PATTERN = "^[0-9]{1,19}(-[0-9]{1,19})?$"
_STREAM_ID = re.compile(STREAM_ID_PATTERN)
_HUB: web.AppKey[LiveHub] = web.AppKey("omnium_live_hub", LiveHub)
_STOPPING: web.AppKey[asyncio.Event] = web.AppKey("omnium_live_stopping", asyncio.Event)
_GAP = (
    b'event: gap\ndata: {"message": "some updates may be missing from this stream; '
    b'read the data again from the API"}\n\n'
)
# No `id:` line: the client's Last-Event-ID stays the last event it was sent, so reconnecting
# replays what it fell behind on (or says gap, when the stream no longer keeps it).
_TOO_SLOW = (
    b'event: gap\ndata: {"message": "this client fell too far behind the live stream and '
    b'was disconnected; reconnect with Last-Event-ID to catch up", "reason": "too slow"}\n\n'
)
_PAUSED = b'event: error\ndata: {"message": "live updates paused; they resume by themselves"}\n\n'
_KEEPALIVE = b": keepalive\n\n"
_WAITING = b": waiting for redis\n\n"
Admit = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
# (Games code, unit code or None) -> None when they exist; else the answer to send instead.
Known = Callable[[str, str | None], Awaitable[web.StreamResponse | None]]
# Whom a request's stream counts against (an API key's name, a client address).
Owner = Callable[[web.Request], str]
_T = TypeVar("_T")


class _Stopping(Exception):
    """The server is stopping: the stream ends so its client reconnects to another copy."""


def live_redis(
    redis_url: str, *, heartbeat_seconds: float, grace_seconds: float, max_connections: int
) -> aioredis.Redis:
    """A Redis client for the stream readers, with at most `max_connections` connections.

    A read blocks for up to a heartbeat, so the socket waits that long and `grace_seconds`
    more: a quiet stream is not a Redis that stopped answering. redis-py does not retry by
    itself, so a failure reaches the route, which then checks the stream's continuity.

    The pool is bounded, and a call waits for a connection rather than failing. The routes
    read only as many Games at once as the pool holds beyond the replays' share, so a replay
    gets a connection at once, or as soon as another replay is done.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        redis_url,
        max_connections=max_connections,
        timeout=None,
        socket_timeout=heartbeat_seconds + grace_seconds,
        socket_connect_timeout=grace_seconds,
        retry=Retry(NoBackoff(), 0),
        driver_info=None,
    )
    return aioredis.Redis.from_pool(pool)


def add_live_routes(
    app: web.Application,
    redis: aioredis.Redis,
    *,
    heartbeat_seconds: float = 15.0,
    retry_seconds: float = 1.0,
    admit: Admit | None = None,
    known: Known | None = None,
    max_streams: int = 5000,
    listener_queue: int = 500,
    counters: LiveCounters | None = None,
    max_seconds: float = 0.0,
    owner: Owner | None = None,
    max_per_client: int = 0,
    client_retry_after_seconds: int = 10,
) -> None:
    """Add both live routes to `app`; `redis` is the one the delivery publisher writes to
    (made with `live_redis`, or any client whose reads outlast a heartbeat).

    The app reads each Games' stream once, however many listen (see LiveHub): at most
    `max_streams` listeners (past it, 503 with Retry-After), each with up to `listener_queue`
    events waiting to be written before it counts as too slow, and at most as many Games at
    once as `redis`'s pool has connections beside the replays' (past it, 503 too).

    `admit`, when given, runs first (the gateway's API key and rate limit): an answer from it
    is sent instead of the stream. `known`, when given, runs next with the codes asked for: an
    answer from it (404 for a Games or unit that does not exist) is sent instead, so a made-up
    code never takes one of the Redis connections the real Games' readers need.

    With `max_seconds`, a stream ends after that long with a `retry:` hint, as below.

    With `owner` and `max_per_client`, one client (whatever `owner` names for its request)
    holds at most that many streams in this process; past it, 429 with Retry-After
    (`client_retry_after_seconds`), so one client cannot take the worker's `max_streams`.

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
    connections = redis.connection_pool.max_connections
    if connections <= REPLAYS_AT_ONCE:
        raise ValueError(
            f"the live routes' Redis client allows {connections} connections, but replays take "
            f"up to {REPLAYS_AT_ONCE} and each Games being read one more; give live_redis() "
            "more max_connections (the gateway's OMNIUM_LIVE_REDIS_CONNECTIONS)"
        )
    hub = LiveHub(
        redis,
        heartbeat_seconds=heartbeat_seconds,
        retry_seconds=retry_seconds,
        max_streams=max_streams,
        max_readers=connections - REPLAYS_AT_ONCE,
        listener_queue=listener_queue,
        counters=counters,
        max_per_client=max_per_client if owner is not None else 0,
    )
    app[_HUB] = hub
    app[_STOPPING] = asyncio.Event()

    async def end_streams(app: web.Application) -> None:
        app[_STOPPING].set()
        await hub.close()

    app.on_shutdown.append(end_streams)
    handler = _handler(known, max_seconds, owner, client_retry_after_seconds)
    if admit is not None:
        handler = _admitted(admit, handler)
    for path in sorted(LIVE_ROUTES):
        app.router.add_get(path, handler)


def live_hub(app: web.Application) -> LiveHub:
    """The app's hub (what it serves and has dropped), for tests and probes."""
    return app[_HUB]


def _handler(
    known: Known | None, max_seconds: float, owner: Owner | None, retry_after: int
) -> Handler:
    async def live(request: web.Request) -> web.StreamResponse:
        return await _live(request, known, max_seconds, owner, retry_after)

    return live


def _admitted(admit: Admit, handler: Handler) -> Handler:
    async def live(request: web.Request) -> web.StreamResponse:
        refused = await admit(request)
        return refused if refused is not None else await handler(request)

    return live


def _problem(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


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


def _goodbye(why: str) -> bytes:
    """The last lines of a stream whose server stops: reconnect soon, each client at its own
    moment within a second, so the copies left are not all hit in the same instant."""
    retry_ms = random.randint(250, 1250)
    return f": {why}; reconnect with Last-Event-ID\nretry: {retry_ms}\n\n".encode()


def _busy(message: str) -> web.Response:
    """A plain refusal, not a stream of errors: the balancer or the client tries another copy,
    or this one a little later, each client at its own moment."""
    answer = _problem(503, message)
    answer.headers["Retry-After"] = str(random.randint(2, 10))
    return answer


async def _live(
    request: web.Request,
    known: Known | None,
    max_seconds: float,
    owner: Owner | None,
    retry_after: int,
) -> web.StreamResponse:
    event = request.match_info["event"]
    unit = request.match_info.get("unit_code")
    refused = _refuse_codes(event, unit)
    if refused is not None:
        return refused
    last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    if last is not None:
        if not _STREAM_ID.match(last):
            return _problem(
                400,
                f"Last-Event-ID {last[:40]!r} is not an id this stream sent; reconnect without it",
            )
        if "-" not in last:
            last = f"{last}-0"
    if known is not None:
        unknown = await known(event, unit)
        if unknown is not None:
            return unknown
    hub = request.app[_HUB]
    joined = _join(hub, event, unit, owner(request) if owner is not None else None, retry_after)
    if isinstance(joined, web.Response):
        return joined
    try:
        return await _stream(request, hub, joined, last, max_seconds)
    finally:
        joined.transport = None  # the connection may serve other requests now
        hub.leave(joined)


def _refuse_codes(event: str, unit: str | None) -> web.Response | None:
    """A 400 when the path's Games or unit code is not one, else None."""
    if not _EVENT.match(event):
        return _problem(400, f"{event[:40]!r} is not a Games code (2 to 32 of A-Z, 0-9, _ or -)")
    if unit is not None and not _UNIT.match(unit):
        return _problem(400, f"{unit[:40]!r} is not a unit code (34 of A-Z, 0-9 or -)")
    return None


def _join(
    hub: LiveHub, event: str, unit: str | None, owner: str | None, retry_after: int
) -> Listener | web.Response:
    """A listener on the hub, or a 503 when this server carries all it can, or a 429 when
    this client already holds its most streams here."""
    try:
        return hub.join(event, unit, owner)
    except ClientFull:
        answer = _problem(
            429,
            f"this client already has {hub.max_per_client} live streams open on this server; "
            "close one (one stream of the Games carries every unit's changes) or try again "
            "after Retry-After seconds",
        )
        answer.headers["Retry-After"] = str(retry_after)
        return answer
    except Full:
        return _busy(
            f"this server already carries its most live streams ({hub.max_streams}); "
            "try again after Retry-After seconds"
        )
    except ReadersFull:
        return _busy(
            f"this server already reads its most Games at once ({hub.max_readers}); "
            "try again after Retry-After seconds"
        )


class _Follow:
    """One listener's side of the stream: what it has written, and what it still owes."""

    def __init__(
        self,
        response: web.StreamResponse,
        hub: LiveHub,
        listener: Listener,
        last: str | None,
        stopping: asyncio.Event,
    ) -> None:
        self.response = response
        self.hub = hub
        self.listener = listener
        self.stopping = stopping
        # Entries at or before this one were sent already (a replay and the fan-out overlap).
        self.last_number: tuple[int, int] | None = None
        # The Last-Event-ID still to replay from, once Redis answers.
        self.pending = last
        self.paused = False
        # A keep-alive is owed only when nothing was written since the last tick.
        self.written_since_tick = False

    async def run(self) -> None:
        listener = self.listener
        # Nothing published from now on is missed: the reader knows where the stream is.
        await _unless_stopping(self.stopping, listener.reader.tried.wait())
        if listener.reader.paused:
            self.paused = True
            await self.response.write(_PAUSED)
        await self._catch_up()
        while True:
            items = await listener.take()
            if listener.dropped:
                await self.response.write(_TOO_SLOW)
                return
            if listener.stopping:
                raise _Stopping
            newest = await self._write(items)
            if newest is not None:
                self.hub.counters.live_lag(time.time() - newest[0] / 1000)

    async def _write(self, items: list[Item]) -> tuple[int, int] | None:
        """Writes one take's entries and signals; returns the newest entry's number written."""
        chunks: list[bytes] = []
        newest: tuple[int, int] | None = None
        for item in items:
            if isinstance(item, tuple):
                number, lines = item
                if self.last_number is not None and number <= self.last_number:
                    continue
                self.last_number = newest = number
                chunks.append(lines)
                self.written_since_tick = True
            elif item is Signal.RESUMED:
                self.paused = False
                if self.pending is not None:
                    if chunks:
                        await self.response.write(b"".join(chunks))
                        chunks = []
                    await self._catch_up()
            else:
                self._signal(item, chunks)
        if chunks:
            await self.response.write(b"".join(chunks))
        return newest

    def _signal(self, item: Signal, chunks: list[bytes]) -> None:
        """The lines a hub signal (other than "resumed") adds to what is written next."""
        if item is Signal.TICK:
            if not self.written_since_tick:
                chunks.append(_KEEPALIVE)
            self.written_since_tick = False
        elif item is Signal.PAUSED:
            if not self.paused:
                self.paused = True
                chunks.append(_PAUSED)
        elif item is Signal.WAITING:
            chunks.append(_WAITING)
        elif item is Signal.GAP:
            # Redis lost the stream: ids start again, and nobody knows what was missed.
            self.paused, self.pending, self.last_number = False, None, None
            chunks.append(_GAP)

    async def _catch_up(self) -> None:
        """The replay a reconnecting client asked for, from the stream; tried again while
        only the replay fails, left for the reader's "resumed" while Redis is down."""
        while self.pending is not None and not self.listener.reader.paused:
            try:
                gap, entries = await _unless_stopping(
                    self.stopping, self.hub.replay(self.listener.reader.key, self.pending)
                )
            except REDIS_ERRORS:
                if not self.paused:
                    self.paused = True
                    await self.response.write(_PAUSED)
                await _unless_stopping(self.stopping, asyncio.sleep(self.hub.retry_seconds))
                continue
            since, self.pending, self.paused = self.pending, None, False
            chunks = [_GAP] if gap else []
            last = None if gap or since == "0-0" else id_number(since)
            unit = self.listener.unit
            for raw_id, fields in entries:
                entry_id = decode(raw_id)
                kind, entry_unit, lines = render(entry_id, fields)
                last = id_number(entry_id)
                # A gap the publisher wrote (it had to drop changes) concerns every unit.
                if unit is None or kind == "gap" or entry_unit == unit:
                    chunks.append(lines)
            self.last_number = last
            if chunks:
                await self.response.write(b"".join(chunks))


async def _stream(
    request: web.Request, hub: LiveHub, listener: Listener, last: str | None, max_seconds: float
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    listener.transport = request.transport
    follow = _Follow(response, hub, listener, last, request.app[_STOPPING])
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        await response.write(b"retry: 1000\n\n")
        try:
            async with asyncio.timeout(max_seconds if max_seconds > 0 else None):
                await follow.run()
        except TimeoutError:
            await response.write(_goodbye("this stream has run its time"))
        except _Stopping:
            # The handler returns, so aiohttp ends the chunked body properly: the client sees
            # the stream end, not a reset, and reconnects after the hint.
            await response.write(_goodbye("this server is stopping"))
    return response
