"""Two cache layers: each worker's own memory in front of Redis, kept true by invalidations.

A response lives in Redis with the generation of its group (a unit, an event's schedule, its
medal table...) current when its database read started. The outbox relay bumps a group's
generation and publishes it when a change is saved, so a copy filled from an older read is never
stored, never trusted again, and every worker drops its own copy within moments. The database
sees one read per key at a time across every worker and copy: a Redis lock per key, and in each
worker one task per key that every waiting request shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from omnium_db import DATABASE_ERRORS
from omnium_gateway._encoding import compress
from omnium_gateway._metrics import Metrics
from omnium_gateway._reads import (
    FINAL,
    LEADERBOARD,
    LIVE,
    NEGATIVE,
    REFERENCE,
    SCHEDULED,
    Loaded,
)
from omnium_settings import Settings

log = logging.getLogger(__name__)

HIT = "HIT"
MISS = "MISS"
STALE = "STALE"


# Store a filled response only if its group's generation is still the one read before the
# database read began: a change saved meanwhile must not be overwritten by older data. Its
# compressed copies go beside it, under their own key, so a worker of the release before
# (which knows only the plain key) still reads the plain one during a rolling deploy.
_FILL = """
local current = redis.call('GET', KEYS[2]) or '0'
if current == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  if ARGV[4] == '' then
    redis.call('DEL', KEYS[3])
  else
    redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[3])
  end
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Errors that mean "this server cannot answer now", as opposed to a bug in the gateway.
REDIS_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
# The database's are omnium_db.DATABASE_ERRORS ("no host is a primary" during a failover too).

# How often, at most, a worker says its Redis pool is full (it can be full on every request).
BUSY_LOG_SECONDS = 60.0


class PoolExhausted(RedisConnectionError):
    """Every connection of this worker's Redis pool stayed in use for the whole wait: Redis is
    up but this worker asks more of it than its pool carries (saturation), not down."""


class BoundedPool(aioredis.BlockingConnectionPool):
    """redis-py's bounded, queueing pool, saying "pool full" apart from "Redis is down"."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            # The pool's own wait ran out (its "No connection available."): no socket failed.
            if isinstance(exc.__cause__, asyncio.TimeoutError):
                raise PoolExhausted(
                    f"all {self.max_connections} Redis connections of this worker were busy "
                    f"for {self.timeout} s"
                ) from exc
            raise


Reader = Callable[[asyncpg.Connection], Awaitable[Loaded]]


class Unavailable(Exception):
    """The database could not answer and no cached copy is left to serve."""


@dataclass(slots=True)
class Entry:
    """One cached response, as stored in Redis and in a worker's memory."""

    status: int
    body: bytes
    etag: str
    ttl_class: str
    fresh_until: float
    stale_until: float
    keep_until: float
    gen: int
    # The body compressed once, when it was filled; None when that would not be smaller.
    gzip: bytes | None = None
    br: bytes | None = None
    # The last response headers built for this copy, per content coding, and for which
    # (X-Cache, max-age).
    headers: dict[str, dict[str, str]] | None = None
    headers_for: tuple[str, int] = ("", -1)

    def pack(self) -> bytes:
        head = (
            f"{self.status} {self.etag} {self.ttl_class} {self.fresh_until:.3f} "
            f"{self.stale_until:.3f} {self.keep_until:.3f} {self.gen}\n"
        )
        return head.encode() + self.body

    @classmethod
    def unpack(cls, raw: bytes) -> Entry:
        head, _, body = raw.partition(b"\n")
        status, etag, ttl_class, fresh, stale, keep, gen = head.decode().split(" ")
        return cls(
            int(status), body, etag, ttl_class, float(fresh), float(stale), float(keep), int(gen)
        )

    def pack_variants(self) -> bytes:
        """The compressed copies, stored beside the plain body; empty when there are none."""
        if self.gzip is None and self.br is None:
            return b""
        gz, br = self.gzip or b"", self.br or b""
        return f"{self.etag} {len(gz)} {len(br)}\n".encode() + gz + br

    def unpack_variants(self, raw: object) -> bool:
        """Take the compressed copies stored for this body; False if none are (or they are of
        another body, filled by a worker that stored no copies)."""
        if not isinstance(raw, bytes) or not raw:
            return False
        head, _, rest = raw.partition(b"\n")
        try:
            etag, gz_len, br_len = head.decode().split(" ")
            if etag != self.etag or len(rest) != int(gz_len) + int(br_len):
                return False
        except ValueError:
            return False
        split = int(gz_len)
        self.gzip = rest[:split] or None
        self.br = rest[split:] or None
        return True

    async def compress(self) -> None:
        self.gzip, self.br = await compress(self.body)


def etag_of(body: bytes) -> str:
    return '"' + hashlib.blake2b(body, digest_size=10).hexdigest() + '"'


@dataclass(frozen=True, slots=True)
class CacheKey:
    """What to cache and how to read it: the key, its invalidation group, the database read."""

    name: str
    group: str
    read: Reader


class Cache:
    """The read-through cache of one worker process."""

    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis | None,
        metrics: Metrics,
        pool: Callable[[], asyncpg.Pool | None],
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.metrics = metrics
        self.pool = pool
        self.ttl = {
            LIVE: settings.gateway.cache_ttl_live,
            SCHEDULED: settings.gateway.cache_ttl_scheduled,
            FINAL: settings.gateway.cache_ttl_final,
            REFERENCE: settings.gateway.cache_ttl_reference,
            LEADERBOARD: settings.gateway.cache_ttl_leaderboard,
            NEGATIVE: settings.gateway.cache_ttl_negative,
        }
        self.local: dict[str, Entry] = {}
        self.groups: dict[str, set[str]] = {}
        self.group_of: dict[str, str] = {}
        # A fill stores its copy only if its group saw no invalidation since the read began.
        self.epochs: dict[str, int] = {}
        self.clears = 0
        self.loading: dict[str, asyncio.Task[tuple[Entry, str]]] = {}
        self.refreshing: dict[str, asyncio.Task[tuple[Entry, str]]] = {}
        # Keys whose refresh another worker or copy holds: not tried again before this time.
        self.recheck_at: dict[str, float] = {}
        self.redis_down_until = 0.0
        self.redis_failures = 0
        self.busy_logged_at = -BUSY_LOG_SECONDS
        # True while this worker hears invalidations; without them a copy is kept only briefly.
        self.listening = False
        self.prefix = settings.gateway.redis_prefix
        self.channel = self.prefix + "invalidate"
        # Copies are kept per set of disciplines the checker holds by setting: a gateway
        # started with a checker switched on never serves a copy made without it.
        held = sorted({d.upper() for d in settings.delivery.checker_disciplines})
        self.copies = self.prefix + (f"held={','.join(held)}:" if held else "")
        self._fill = redis.register_script(_FILL) if redis is not None else None
        self._release = redis.register_script(_RELEASE) if redis is not None else None

    # -- the one entry point -----------------------------------------------------------------

    async def get(self, key: CacheKey) -> tuple[Entry, str]:
        """The response for `key` and how it was served: HIT, MISS or STALE."""
        entry = self.local.get(key.name)
        if entry is not None:
            now = time.time()
            if now < entry.fresh_until:
                # Least recently used out first: a hit puts its key at the back of the line.
                self.local[key.name] = self.local.pop(key.name)
                return entry, HIT
            if now < entry.stale_until:
                self._refresh_soon(key, entry)
                return entry, STALE
        task = self.loading.get(key.name)
        if task is None:
            task = asyncio.create_task(self._load(key, entry, refresh=False), name="cache load")
            self.loading[key.name] = task
            task.add_done_callback(lambda _: self.loading.pop(key.name, None))
        return await asyncio.shield(task)

    def background(self) -> list[asyncio.Task[tuple[Entry, str]]]:
        """The loads and refreshes under way (a stopping worker ends them before Redis)."""
        return [*self.loading.values(), *self.refreshing.values()]

    @property
    def redis_up(self) -> bool:
        return self.redis is not None and time.time() >= self.redis_down_until

    # -- invalidation ------------------------------------------------------------------------

    def invalidate(self, groups: list[str]) -> None:
        """Drop this worker's copies of every key in these groups (from the outbox relay)."""
        for group in groups:
            self.epochs[group] = self.epochs.get(group, 0) + 1
            for name in self.groups.pop(group, ()):
                self.local.pop(name, None)
                self.group_of.pop(name, None)
        self.metrics.add("omnium_gateway_invalidations", len(groups))

    def distrust_local(self) -> None:
        """Invalidations may have been missed: keep copies only for the short no-Redis time."""
        self.clears += 1
        cap = time.time() + self.settings.gateway.local_seconds_without_redis
        for entry in self.local.values():
            if entry.fresh_until > cap:
                entry.fresh_until = cap
                entry.stale_until = min(entry.stale_until, cap)

    def redis_failed(self, exc: BaseException) -> None:
        """A Redis call failed: this request reads PostgreSQL. Several failures in a row (a
        stopped Redis refuses at once, so they come fast) mean Redis is down for a while.

        A full pool is not a failure: Redis answers, this worker is asking more of it than its
        pool carries. That request goes around Redis (PostgreSQL, or this worker's own bucket)
        while every other request still uses Redis; counting it as down would send the whole
        worker to PostgreSQL exactly when it is busiest."""
        if isinstance(exc, PoolExhausted):
            self.metrics.add("omnium_gateway_redis_busy")
            now = time.monotonic()
            if now - self.busy_logged_at >= BUSY_LOG_SECONDS:
                self.busy_logged_at = now
                log.warning(
                    "Redis pool full (%s): such reads go to PostgreSQL meanwhile; counted in "
                    "omnium_gateway_redis_busy_total, said again at most every %.0f s",
                    exc,
                    BUSY_LOG_SECONDS,
                )
            return
        self.metrics.add("omnium_gateway_redis_errors")
        self.redis_failures += 1
        if self.redis_failures < self.settings.gateway.redis_failures_to_trip:
            return
        if self.redis_up:
            log.warning("Redis did not answer (%s); reading PostgreSQL directly for now", exc)
            self.distrust_local()
        self.redis_down_until = time.time() + self.settings.gateway.redis_retry_seconds

    # -- loading -----------------------------------------------------------------------------

    def _snapshot(self, group: str) -> tuple[int, int]:
        return self.epochs.get(group, 0), self.clears

    def _keep(self, key: CacheKey, entry: Entry, snapshot: tuple[int, int]) -> None:
        if self._snapshot(key.group) != snapshot:
            return
        if (
            key.name not in self.local
            and len(self.local) >= self.settings.gateway.local_max_entries
        ):
            # The least recently used out (hits move their key to the back).
            oldest = next(iter(self.local))
            self.local.pop(oldest)
            self.groups.get(self.group_of.pop(oldest, ""), set()).discard(oldest)
        cap = time.time() + self.settings.gateway.local_seconds_without_redis
        if not self.listening and entry.fresh_until > cap:
            entry = dataclasses.replace(
                entry, fresh_until=cap, stale_until=min(entry.stale_until, cap)
            )
        self.local.pop(key.name, None)
        self.local[key.name] = entry
        self.group_of[key.name] = key.group
        self.groups.setdefault(key.group, set()).add(key.name)

    def _refresh_soon(self, key: CacheKey, entry: Entry) -> None:
        if key.name in self.refreshing:
            return
        if self.recheck_at and self.recheck_at.get(key.name, 0.0) > time.monotonic():
            return
        task = asyncio.create_task(self._load(key, entry, refresh=True), name="cache refresh")
        self.refreshing[key.name] = task
        task.add_done_callback(self._refreshed(key.name))

    def _refreshed(self, name: str) -> Callable[[asyncio.Task[tuple[Entry, str]]], None]:
        def done(task: asyncio.Task[tuple[Entry, str]]) -> None:
            self.refreshing.pop(name, None)
            if not task.cancelled() and task.exception() is not None:
                # A failed background refresh keeps the stale copy; the next request retries.
                log.info("background refresh of %s failed: %s", name, task.exception())

        return done

    async def _load(
        self, key: CacheKey, known: Entry | None, *, refresh: bool
    ) -> tuple[Entry, str]:
        snapshot = self._snapshot(key.group)
        if self.redis_up:
            try:
                return await self._load_shared(key, known, snapshot, refresh=refresh)
            except REDIS_ERRORS as exc:
                self.redis_failed(exc)
        return await self._load_direct(key, known, snapshot)

    async def _load_direct(
        self, key: CacheKey, known: Entry | None, snapshot: tuple[int, int]
    ) -> tuple[Entry, str]:
        """Redis is down: read PostgreSQL, keep the copy in this worker for a short time."""
        loaded = await self._read(key, known)
        if isinstance(loaded, Entry):
            return loaded, STALE
        entry = self._entry(loaded, 0, cap=self.settings.gateway.local_seconds_without_redis)
        await entry.compress()
        self._keep(key, entry, snapshot)
        return entry, MISS

    async def _load_shared(
        self, key: CacheKey, known: Entry | None, snapshot: tuple[int, int], *, refresh: bool
    ) -> tuple[Entry, str]:
        assert self.redis is not None
        redis = self.redis
        entry_key, gen_key, lock_key, variants_key = self._keys(key)
        deadline = time.monotonic() + self.settings.gateway.fill_lock_seconds
        waited = False
        delay = 0.002
        while True:
            raw, gen_raw, variants = await redis.mget(entry_key, gen_key, variants_key)
            self.redis_failures = 0
            gen = int(gen_raw or 0)
            found = Entry.unpack(raw) if isinstance(raw, bytes) else None
            now = time.time()
            if found is not None and found.gen == gen:
                newer = known is None or found.fresh_until > known.fresh_until
                fresh = now < found.fresh_until and (newer or not refresh)
                stale = now < found.stale_until and not refresh and not waited
                if (fresh or stale) and not found.unpack_variants(variants):
                    await found.compress()
                if fresh:
                    self._keep(key, found, snapshot)
                    return found, MISS if waited else HIT
                if stale:
                    self._keep(key, found, snapshot)
                    self._refresh_soon(key, found)
                    return found, STALE
            best = found if found is not None else known
            token = secrets.token_hex(8)
            lock_ms = int(self.settings.gateway.fill_lock_seconds * 1000)
            if await redis.set(lock_key, token, nx=True, px=lock_ms):
                return await self._fill_under_lock(key, known, snapshot, token, refresh=refresh)
            # Another worker or copy is reading this key.
            if refresh:
                assert known is not None
                return self._look_again_later(key, known)
            if time.monotonic() >= deadline:
                return await self._read_unshared(key, best, gen)
            waited = True
            # Watch the small lock key, not the entry (a schedule is tens of kilobytes): read
            # the entry again once the reader has let go of the lock.
            while time.monotonic() < deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
                if not await redis.exists(lock_key):
                    break

    async def _fill_under_lock(
        self,
        key: CacheKey,
        known: Entry | None,
        snapshot: tuple[int, int],
        token: str,
        *,
        refresh: bool,
    ) -> tuple[Entry, str]:
        """This worker holds the fill lock: read the database, store the entry for everyone."""
        assert self.redis is not None and self._fill is not None and self._release is not None
        entry_key, gen_key, lock_key, variants_key = self._keys(key)
        try:
            # Another reader may have filled the key and let go of the lock between this
            # worker's look and its taking the lock: look once more, holding it, so that one
            # cold key costs one database read however the workers interleave.
            raw, gen_raw, variants = await self.redis.mget(entry_key, gen_key, variants_key)
            gen = int(gen_raw or 0)
            found = Entry.unpack(raw) if isinstance(raw, bytes) else None
            newer = found is not None and (
                not refresh or known is None or found.fresh_until > known.fresh_until
            )
            if found is not None and newer and found.gen == gen and time.time() < found.fresh_until:
                if not found.unpack_variants(variants):
                    await found.compress()
                self._keep(key, found, snapshot)
                return found, MISS
            best = found if found is not None else known
            loaded = await self._read(key, best)
            if isinstance(loaded, Entry):
                return loaded, STALE
            entry = self._entry(loaded, gen)
            await entry.compress()
            px = max(1, int((entry.keep_until - time.time()) * 1000))
            stored = await self._fill(
                keys=[entry_key, gen_key, variants_key],
                args=[gen, entry.pack(), px, entry.pack_variants()],
            )
            if stored:
                self._keep(key, entry, snapshot)
            return entry, MISS
        finally:
            with contextlib.suppress(*REDIS_ERRORS):
                await self._release(keys=[lock_key], args=[token])

    def _look_again_later(self, key: CacheKey, known: Entry) -> tuple[Entry, str]:
        """Nobody waits on a refresh (the stale copy is served), so do not poll for the other
        read: look again on a request a little later. When many keys go stale at once, polling
        them all would flood Redis just when it is busiest."""
        self.recheck_at[key.name] = time.monotonic() + self.settings.gateway.refresh_recheck_seconds
        if len(self.recheck_at) > self.settings.gateway.local_max_entries:
            self.recheck_at.clear()
        return known, STALE

    async def _read_unshared(
        self, key: CacheKey, best: Entry | None, gen: int
    ) -> tuple[Entry, str]:
        """The other reader took too long: read for this request alone, storing nothing."""
        loaded = await self._read(key, best)
        if isinstance(loaded, Entry):
            return loaded, STALE
        entry = self._entry(loaded, gen)
        await entry.compress()
        return entry, MISS

    async def _read(self, key: CacheKey, best: Entry | None) -> Loaded | Entry:
        """One database read; if the database fails, the best copy left (stale-if-error)."""
        pool = self.pool()
        try:
            if pool is None:
                raise OSError("no connection to PostgreSQL yet")
            async with asyncio.timeout(self.settings.gateway.database_timeout_seconds):
                async with pool.acquire() as conn:
                    loaded = await key.read(conn)
        except DATABASE_ERRORS as exc:
            self.metrics.add("omnium_gateway_db_errors")
            if best is not None and time.time() < best.keep_until:
                log.info("database read of %s failed (%s); serving the cached copy", key.name, exc)
                return best
            raise Unavailable(str(exc)) from exc
        self.metrics.db_read(loaded.ttl_class)
        return loaded

    def _entry(self, loaded: Loaded, gen: int, cap: float | None = None) -> Entry:
        now = time.time()
        ttl = float(self.ttl[loaded.ttl_class])
        if cap is not None:
            ttl = min(ttl, cap)
        fresh = now + ttl
        stale = fresh + self.settings.gateway.cache_stale_window
        keep = stale
        if loaded.ttl_class != NEGATIVE:
            keep = max(stale, now + self.settings.gateway.cache_stale_if_error_seconds)
        return Entry(
            loaded.status,
            loaded.body,
            etag_of(loaded.body),
            loaded.ttl_class,
            fresh,
            stale,
            keep,
            gen,
        )

    def _keys(self, key: CacheKey) -> tuple[str, str, str, str]:
        copies = self.copies
        return (
            copies + "e:" + key.name,
            self.gen_key(key.group),
            copies + "lock:" + key.name,
            copies + "z:" + key.name,
        )

    def gen_key(self, group: str) -> str:
        return self.prefix + "gen:" + group
