"""One reader per Games stream in each process, fanned out in memory to every listener of it."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeAlias, cast

import redis.asyncio as aioredis

from omnium_live._publisher import stream_key
from omnium_telemetry import continued_span, tracing_on

log = logging.getLogger("omnium.live")

# What Redis raises when it, not the caller, is the trouble (timeouts are OSErrors).
REDIS_ERRORS: tuple[type[BaseException], ...] = (aioredis.RedisError, OSError)
# Replays (a reconnect with Last-Event-ID) read the stream beside the readers; this many at once
# per process, so a herd of reconnects queues here instead of opening a connection each. The
# readers take the rest of the pool, so a replay always finds a connection.
REPLAYS_AT_ONCE = 4
# Entries one XREAD brings back at most; the fan-out writes them to listeners as one batch.
_READ_COUNT = 100
# A listener dropped for being slow has this long to take its `gap` before its socket is cut:
# a client that reads nothing at all must not hold its slot for ever.
_SLOW_CLOSE_SECONDS = 10.0


class Signal(enum.Enum):
    """What a reader tells its listeners besides the entries themselves."""

    TICK = "tick"  # a heartbeat went by: a quiet listener writes a keepalive
    PAUSED = "paused"  # Redis stopped answering
    WAITING = "waiting"  # still down, tried again
    RESUMED = "resumed"  # Redis answers again, the stream carries on where it was
    GAP = "gap"  # Redis answers again but lost the stream: what was missed is unknown


# An entry as every listener writes it: its id as numbers (to compare) and its SSE lines.
Entry = tuple[tuple[int, int], bytes]
Item = Entry | Signal

# Stream entries as XRANGE and XREAD give them: bytes from a client that does not decode
# responses, str from one that does. redis-py's own types allow a None id and fields, which only
# XCLAIM gives (for a deleted entry); ours are read, never claimed. XREAD (RESP2, the client's
# default) gives one [stream key, entries] pair per stream.
Fields: TypeAlias = Mapping[bytes | str, bytes | str]
StreamEntries: TypeAlias = list[tuple[bytes | str, Fields]]
StreamsRead: TypeAlias = list[tuple[bytes | str, StreamEntries]]


class LiveCounters(Protocol):
    """Where the hub reports what an operator watches (the gateway's /metrics)."""

    def live_listeners(self, count: int) -> None: ...

    def live_dropped(self) -> None: ...

    def live_refused(self) -> None: ...

    def live_lag(self, seconds: float) -> None: ...


class _NoCounters:
    def live_listeners(self, count: int) -> None:
        pass

    def live_dropped(self) -> None:
        pass

    def live_refused(self) -> None:
        pass

    def live_lag(self, seconds: float) -> None:
        pass


class Full(Exception):
    """This process already serves as many streams as its setting allows."""


class ReadersFull(Exception):
    """A new Games would need a reader, and every Redis connection for readers is taken."""


class ClientFull(Exception):
    """This client (its API key, or its address) already holds its most streams here."""


def decode(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def field_of(fields: Fields, name: str, default: str) -> str:
    """A stream entry's field, from a client that decodes responses or one that does not."""
    value = fields.get(name.encode(), fields.get(name, default))
    return decode(value)


def id_number(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def render(entry_id: str, fields: Fields) -> tuple[str, str, bytes]:
    """(kind, unit, the SSE lines) of one stream entry."""
    kind = field_of(fields, "kind", "change")
    data = field_of(fields, "data", "{}")
    return (
        kind,
        field_of(fields, "unit", ""),
        f"id: {entry_id}\nevent: {kind}\ndata: {data}\n\n".encode(),
    )


async def newest_id(redis: aioredis.Redis, key: str) -> str:
    newest = await redis.xrevrange(key, count=1)
    return decode(newest[0][0]) if newest else "0-0"


async def resume_id(redis: aioredis.Redis, key: str, cursor: str | None) -> tuple[str, bool]:
    """Carry on after `cursor` when the stream still holds that entry: trimming only drops the
    oldest, so everything after it is there too. Otherwise continuity is lost (trimmed past it,
    or Redis restarted with an empty stream whose ids start again, maybe below the cursor): a
    gap, then everything still kept. None: "from now" was asked while Redis was down, so what
    was saved meanwhile is unknown."""
    if cursor is None:
        return await newest_id(redis, key), True
    if cursor != "0-0":
        kept = await redis.xrange(key, min=cursor, max=cursor, count=1)
        if kept:
            return cursor, False
    return "0-0", True


async def trimmed(redis: aioredis.Redis, key: str) -> bool:
    """Whether the stream has lost entries off its front (trimmed, or deleted): more were
    ever added than it holds. A stream that does not exist has lost nothing."""
    try:
        info = await redis.xinfo_stream(key)
    except aioredis.ResponseError:
        return False
    added = info.get("entries-added")
    if added is None:
        # Redis before 7 does not count what was added: say a gap rather than risk silence.
        return True
    return int(added) > int(info["length"])


class Listener:
    """One SSE client: a bounded queue of what it has still to write, filled by the reader."""

    __slots__ = (
        "_waiter",
        "dropped",
        "limit",
        "owner",
        "pending",
        "reader",
        "stopping",
        "transport",
        "unit",
    )

    def __init__(
        self, reader: StreamReader, unit: str | None, limit: int, owner: str | None = None
    ) -> None:
        self.reader = reader
        self.unit = unit
        self.limit = limit
        self.owner = owner
        self.pending: deque[Item] = deque()
        self.dropped = False
        self.stopping = False
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None

    def offer(self, items: Sequence[Item]) -> bool:
        """False when the listener is too far behind to take them: `limit` items still
        waiting. A listener keeping up takes any one read's batch, however large."""
        if len(self.pending) >= self.limit:
            return False
        self.pending.extend(items)
        self._wake()
        return True

    def tell(self, signal: Signal) -> bool:
        if signal is Signal.TICK and self.pending and self.pending[-1] is Signal.TICK:
            return True  # a listener stuck on a write needs one keepalive, not one per beat
        return self.offer((signal,))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def drop(self) -> None:
        self.dropped = True
        self._wake()

    def stop(self) -> None:
        self.stopping = True
        self._wake()

    async def take(self) -> list[Item]:
        """Everything waiting, once there is something; [] once dropped or stopping."""
        while not self.pending and not self.dropped and not self.stopping:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.dropped or self.stopping:
            return []
        items = list(self.pending)
        self.pending.clear()
        return items

    def abort_if_open(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.abort()


class StreamReader:
    """The one blocking XREAD on a Games stream in this process, and who listens to it."""

    def __init__(self, hub: LiveHub, event: str) -> None:
        self.hub = hub
        self.event = event
        self.key = stream_key(event)
        self.everyone: set[Listener] = set()
        self.by_unit: dict[str, set[Listener]] = {}
        self.cursor: str | None = None
        self.paused = False
        # Set once the first try at the stream is over, answered or not.
        self.tried = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def listeners(self) -> int:
        return len(self.everyone) + sum(len(s) for s in self.by_unit.values())

    def add(self, listener: Listener) -> None:
        if listener.unit is None:
            self.everyone.add(listener)
        else:
            self.by_unit.setdefault(listener.unit, set()).add(listener)

    def remove(self, listener: Listener) -> bool:
        if listener.unit is None:
            if listener in self.everyone:
                self.everyone.discard(listener)
                return True
            return False
        unit_set = self.by_unit.get(listener.unit)
        if unit_set is None or listener not in unit_set:
            return False
        unit_set.discard(listener)
        if not unit_set:
            del self.by_unit[listener.unit]
        return True

    def _all(self) -> list[Listener]:
        everyone = list(self.everyone)
        for unit_set in self.by_unit.values():
            everyone.extend(unit_set)
        return everyone

    def broadcast(self, signal: Signal) -> None:
        for listener in self._all():
            if not listener.tell(signal):
                self.hub.drop(listener)

    async def run(self) -> None:
        hub = self.hub
        redis = hub.redis
        block_ms = max(1, int(hub.heartbeat_seconds * 1000))
        last_tick = time.monotonic()
        started = False
        try:
            while self.listeners():
                try:
                    if not started:
                        self.cursor = await newest_id(redis, self.key)
                        started = True
                        if self.paused:
                            # "From now" was asked while Redis was down: what was saved
                            # meanwhile is unknown to every listener.
                            self.paused = False
                            self.broadcast(Signal.GAP)
                    elif self.paused:
                        self.cursor, gap = await resume_id(redis, self.key, self.cursor)
                        self.paused = False
                        self.broadcast(Signal.GAP if gap else Signal.RESUMED)
                    self.tried.set()
                    cursor: str = self.cursor or "0-0"
                    found = cast(
                        "StreamsRead",
                        await redis.xread({self.key: cursor}, count=_READ_COUNT, block=block_ms),
                    )
                except REDIS_ERRORS as exc:
                    if not self.paused:
                        log.warning(
                            "live stream %s paused: Redis does not answer (%s)", self.key, exc
                        )
                        self.paused = True
                        self.broadcast(Signal.PAUSED)
                    else:
                        self.broadcast(Signal.WAITING)
                    self.tried.set()
                    await asyncio.sleep(hub.retry_seconds)
                    last_tick = time.monotonic()
                    continue
                if found:
                    self._fan_out(found)
                now = time.monotonic()
                if not found or now - last_tick >= hub.heartbeat_seconds:
                    last_tick = now
                    self.broadcast(Signal.TICK)
        finally:
            hub.reader_ended(self)

    def _fan_out(self, found: StreamsRead) -> None:
        if not tracing_on():
            self._offer(found)
            return
        # The SSE publish continues the trace of the change each entry carries (the first
        # one's, linked to the rest of this read's).
        traces = [
            field_of(fields, "trace", "") or None
            for _key, entries in found
            for _entry_id, fields in entries
        ]
        if not any(traces):
            self._offer(found)
            return
        with continued_span(
            "live.sse_publish",
            traces,
            attributes={"omnium.live.stream": self.key, "omnium.live.listeners": self.listeners()},
        ):
            self._offer(found)

    def _offer(self, found: StreamsRead) -> None:
        everyone: list[Item] = []
        per_unit: dict[str, list[Item]] = {}
        by_unit = self.by_unit
        for _key, entries in found:
            for raw_id, fields in entries:
                entry_id = decode(raw_id)
                self.cursor = entry_id
                kind, unit, lines = render(entry_id, fields)
                item: Entry = (id_number(entry_id), lines)
                everyone.append(item)
                if kind == "gap":
                    # A gap the publisher wrote (it had to drop changes) concerns every unit.
                    for listening_unit in by_unit:
                        per_unit.setdefault(listening_unit, []).append(item)
                elif unit in by_unit:
                    per_unit.setdefault(unit, []).append(item)
        hub = self.hub
        for listener in list(self.everyone):
            if not listener.offer(everyone):
                hub.drop(listener)
        for unit, items in per_unit.items():
            for listener in list(by_unit.get(unit, ())):
                if not listener.offer(items):
                    hub.drop(listener)


class LiveHub:
    """Every live stream of one process: a reader per Games stream, a queue per listener.

    Redis connections stay one per Games being listened to (plus a few for replays), however
    many listeners there are, and at most `max_readers` Games are read at once: each reader
    holds a connection for its blocking read, so that many fill the pool but for the replays'
    share. A listener too slow for its queue is dropped with a `gap`, so it never holds the
    others up nor makes memory grow.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        heartbeat_seconds: float,
        retry_seconds: float,
        max_streams: int,
        max_readers: int,
        listener_queue: int,
        counters: LiveCounters | None = None,
        max_per_client: int = 0,
    ) -> None:
        self.redis = redis
        self.heartbeat_seconds = heartbeat_seconds
        self.retry_seconds = retry_seconds
        self.max_streams = max_streams
        self.max_readers = max_readers
        self.listener_queue = listener_queue
        self.counters: LiveCounters = counters or _NoCounters()
        self.readers: dict[str, StreamReader] = {}
        self.count = 0
        # Streams open per client (0: no cap). Only clients with a stream open are in it, so
        # it holds at most max_streams entries, however many clients come and go.
        self.max_per_client = max_per_client
        self.by_owner: dict[str, int] = {}
        self.dropped = 0
        self.stopping = False
        self.replays = asyncio.Semaphore(REPLAYS_AT_ONCE)
        self.counters.live_listeners(0)

    def join(self, event: str, unit: str | None, owner: str | None = None) -> Listener:
        """A new listener of `event` (or of its `unit`), counted against `owner` when given:
        Full, ReadersFull or ClientFull when this process may not take it."""
        if self.count >= self.max_streams:
            self.counters.live_refused()
            raise Full
        held = self.by_owner.get(owner, 0) if owner is not None else 0
        if owner is not None and 0 < self.max_per_client <= held:
            self.counters.live_refused()
            raise ClientFull
        reader = self.readers.get(event)
        if reader is None:
            # A reader whose listeners left still holds its connection until its read returns
            # (a heartbeat at most), so it counts until it has ended.
            if len(self.readers) >= self.max_readers:
                self.counters.live_refused()
                raise ReadersFull
            reader = StreamReader(self, event)
            self.readers[event] = reader
        listener = Listener(reader, unit, self.listener_queue, owner)
        if owner is not None:
            self.by_owner[owner] = held + 1
        reader.add(listener)
        if reader.task is None:
            reader.task = asyncio.create_task(reader.run(), name=f"live reader {event}")
        self.count += 1
        self.counters.live_listeners(self.count)
        return listener

    def leave(self, listener: Listener) -> None:
        if listener.reader.remove(listener):
            self.count -= 1
            self.counters.live_listeners(self.count)
            owner = listener.owner
            if owner is not None:
                held = self.by_owner.pop(owner, 0) - 1
                if held > 0:
                    self.by_owner[owner] = held

    def drop(self, listener: Listener) -> None:
        """Too slow: out of the fan-out now, told so by its own task, cut if it never reads."""
        self.leave(listener)
        if listener.dropped:
            return
        listener.drop()
        self.dropped += 1
        self.counters.live_dropped()
        asyncio.get_running_loop().call_later(_SLOW_CLOSE_SECONDS, listener.abort_if_open)

    def reader_ended(self, reader: StreamReader) -> None:
        if self.readers.get(reader.event) is reader:
            del self.readers[reader.event]
        # Listeners that joined while it was ending get a reader of their own.
        waiting = reader._all()
        if waiting and not self.stopping:
            fresh = StreamReader(self, reader.event)
            self.readers[reader.event] = fresh
            for listener in waiting:
                listener.reader = fresh
                fresh.add(listener)
            fresh.task = asyncio.create_task(fresh.run(), name=f"live reader {reader.event}")

    async def replay(self, key: str, since: str) -> tuple[bool, StreamEntries]:
        """(gap, entries) for a client that last saw `since`: what the stream still keeps after
        it, or, when it no longer holds `since`, a gap and everything it keeps."""
        async with self.replays:
            if since != "0-0":
                kept = await self.redis.xrange(key, min=since, max=since, count=1)
                if kept:
                    return False, await self._entries(key, f"({since}")
                return True, await self._entries(key, "-")
            # "From the start": whole only if nothing was ever trimmed off the front.
            entries = await self._entries(key, "-")
            return await trimmed(self.redis, key), entries

    async def _entries(self, key: str, start: str) -> StreamEntries:
        return cast("StreamEntries", await self.redis.xrange(key, min=start, max="+"))

    async def close(self) -> None:
        """The server stops: every listener says goodbye, every reader ends."""
        self.stopping = True
        readers = list(self.readers.values())
        for reader in readers:
            for listener in reader._all():
                listener.stop()
        for reader in readers:
            if reader.task is not None:
                reader.task.cancel()
        for reader in readers:
            if reader.task is not None:
                with contextlib.suppress(asyncio.CancelledError, *REDIS_ERRORS):
                    await reader.task
