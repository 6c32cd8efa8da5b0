"""One gateway worker's state: the pool, Redis, the cache, the limiter, the relay and the
counters; admitting a request under its key's limits, and answering a read from the cache."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import asyncpg
import redis.asyncio as aioredis
from aiohttp import web
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from omnium_accounts import ApiKeys, hash_key
from omnium_db import DATABASE_ERRORS, PoolRoad, create_pool, pool_answers
from omnium_gateway import _reads
from omnium_gateway._cache import (
    HIT,
    REDIS_ERRORS,
    STALE,
    BoundedPool,
    Cache,
    CacheKey,
    Entry,
    PoolExhausted,
    Unavailable,
)
from omnium_gateway._cors import BadToken, Cors, StreamTokens
from omnium_gateway._encoding import BROTLI, GZIP, IDENTITY, acceptable, variant_etag
from omnium_gateway._limits import (
    AddressBuckets,
    Client,
    RateLimiter,
    database_keys,
    parse_api_keys,
    retry_after,
)
from omnium_gateway._metrics import FLUSH_SECONDS, Metrics
from omnium_gateway._openapi import document
from omnium_gateway._outbox import OutboxRelay
from omnium_gateway._purge import SharedCachePurge
from omnium_live import LIVE_ROUTES
from omnium_metrics import waiting
from omnium_process import client_address
from omnium_settings import Settings

log = logging.getLogger(__name__)
# Longest each part of a worker's stop may take (its tasks, then its pool).
STOP_PART_SECONDS = 2.0
# The relay's own: its lease, its renewer and its invalidations, at most three at once.
RELAY_REDIS_CONNECTIONS = 4

JSON_TYPE = "application/json"
# The bucket a request was counted against, for its answer's RateLimit fields.
LIMITED: web.RequestKey[Client] = web.RequestKey("omnium_limited", Client)


def redis_client(url: str, settings: Settings, name: str, connections: int) -> aioredis.Redis:
    """A client over a bounded pool that queues (a burst of refreshes waits for a connection
    instead of failing as if Redis were down), named `omnium-<name>` in Redis' CLIENT LIST. A
    wait for a connection that runs out raises PoolExhausted: Redis is busy, not down.

    No retries inside redis-py: a Redis that is down must cost one short timeout, after which
    the cache reads PostgreSQL and leaves Redis alone for a while."""
    timeout = settings.gateway.redis_timeout_seconds
    pool = BoundedPool.from_url(
        url,
        max_connections=connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        client_name=f"omnium-{name}",
        # No CLIENT SETINFO: it costs each new connection a round trip and a read of the
        # package's metadata from disk, and a burst opens many at once.
        driver_info=None,
    )
    return aioredis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))


class RouteSet(Protocol):
    """More routes on the same app (live SSE, the scorer console): one line in make_app each."""

    def add_routes(self, app: web.Application, gateway: Gateway) -> None: ...

    def openapi(self) -> dict[str, Any]:
        """This set's part of the OpenAPI document: {"paths": ..., "components": ...}."""
        ...


def error_answer(
    status: int, message: str, *, retry_after_seconds: float | None = None, **extra: str
) -> web.Response:
    """An error as JSON, never cached; with `retry_after_seconds`, a Retry-After header too."""
    headers = {"Content-Type": JSON_TYPE, "Cache-Control": "no-store"}
    if retry_after_seconds is not None:
        headers["Retry-After"] = retry_after(retry_after_seconds)
    return web.Response(body=_reads.error_body(message, **extra), status=status, headers=headers)


def no_event(event: str) -> web.Response:
    message = f"There is no event {event}." if event.isprintable() else "There is no such event."
    return error_answer(404, message)


# A 304 describes the copy the client holds: no body, so no body headers.
_NOT_ON_304 = frozenset({"Content-Type", "Content-Encoding"})


def _etag_matches(header: str, etag: str) -> bool:
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


class Gateway:
    """One worker's state: the pool, Redis, the cache, the limiter, the relay and the counters."""

    def __init__(
        self, settings: Settings, metrics: Metrics, route_sets: Sequence[RouteSet]
    ) -> None:
        self.settings = settings
        # Disciplines the checker holds for everyone by setting; clients' checkers are read
        # from the database with each unit (see results_held in migration 0014).
        self.held = tuple(d.upper() for d in settings.delivery.checker_disciplines)
        self.metrics = metrics
        self.route_sets = list(route_sets)
        self.pool: asyncpg.Pool | None = None
        self.redis: aioredis.Redis | None = None
        self.subscriber: aioredis.Redis | None = None
        if url := settings.server.redis_url:
            self.redis = redis_client(url, settings, "gateway", settings.gateway.redis_connections)
            self.subscriber = aioredis.Redis.from_url(
                url,
                socket_connect_timeout=settings.gateway.redis_timeout_seconds,
                retry=Retry(NoBackoff(), 0),
                health_check_interval=5,
                client_name="omnium-gateway-subscriber",
                driver_info=None,
            )
        self.cache = Cache(settings, self.redis, metrics, lambda: self.pool)
        self.limiter = RateLimiter(settings, self.redis, self.cache)
        # Only the worker leading the relay sends purges; the others' stays idle.
        self.purge = SharedCachePurge(settings, metrics) if settings.gateway.purge_urls else None
        self.relay: OutboxRelay | None = None
        if url:
            # The relay's connections are its own, closed by the relay when it has stopped.
            relay_redis = redis_client(url, settings, "gateway-relay", RELAY_REDIS_CONNECTIONS)
            self.relay = OutboxRelay(settings, relay_redis, self.cache, self.purge)
        self.keys = parse_api_keys(settings)
        self.cors = Cors(settings)
        self.tokens = StreamTokens.from_settings(settings)
        # Keys made on the console, read every gateway_keys_reload_seconds; the last set read
        # stays while the database is down.
        self.database_keys: dict[str, Client] = {}
        self.known_keys: dict[str, Client] = {}
        # Per client address, behind our proxies (omnium_process.client_address): the reads
        # without a key, the scorer console and provider pushes, and every other route. Each
        # its own bucket, so fans reading on a venue's network do not use up its scorers'.
        g, most = settings.gateway, settings.gateway.rate_clients
        self.anonymous = AddressBuckets(
            "ip", "anonymous reads from this address", g.anonymous_rate_per_second,
            g.anonymous_burst, most,
        )  # fmt: skip
        self.console = AddressBuckets(
            "console", "the scorer console from this address", g.console_rate_per_second,
            g.console_burst, most,
        )  # fmt: skip
        self.other = AddressBuckets(
            "other", "this address", g.other_rate_per_second, g.other_burst, most
        )
        # The routes (as the router names them) whose handlers call admit() themselves; every
        # other route is limited by its address before its handler runs.
        self.admitting: set[str] = set()
        self.tasks: list[asyncio.Task[None]] = []
        # Set on SIGTERM: /readyz says not ready, so balancers send this copy nothing new.
        self.stopping = False
        self.openapi_body = json.dumps(
            document(
                [rs.openapi() for rs in self.route_sets],
                settings.gateway.anonymous_reads,
                settings.gateway.public_metrics,
                site=settings.gateway,
            )
        ).encode()
        # A shared cache (Varnish, a CDN) may keep a copy as long as the gateway does: the
        # relay purges it when its data changes. Reads behind API keys are not for sharing.
        self._cache_scope = "public" if settings.gateway.anonymous_reads else "private"
        self._cache_control = (
            f", stale-while-revalidate={settings.gateway.cache_stale_window}"
            f", stale-if-error={settings.gateway.cache_stale_if_error_seconds}"
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self._connect_database()
        if self.pool is None:
            self.tasks.append(asyncio.create_task(self._keep_connecting(), name="database connect"))
        # Before the first request: a worker starting (a deploy, a restart) must not answer
        # 401 to keys made on the console while its first read is on the way.
        failing = not await self._try_load_keys(failing=False)
        self.tasks.append(asyncio.create_task(self._reload_keys(failing), name="keys reload"))
        if self.subscriber is not None:
            self.tasks.append(asyncio.create_task(self._listen(), name="invalidations"))
        if self.relay is not None:
            self.tasks.append(asyncio.create_task(self.relay.run(), name="outbox relay"))
            if self.purge is not None:
                self.tasks.append(asyncio.create_task(self.purge.run(), name="purge"))
        self.tasks.append(asyncio.create_task(self._sample_gauges(), name="gauges"))

    def sample_gauges(self) -> None:
        """This worker's gauges: Redis, its memory, its pool (summed over workers on /metrics)."""
        metrics = self.metrics
        metrics.redis_up.set(1.0 if self.cache.redis_up else 0.0)
        metrics.local_entries.set(len(self.cache.local))
        pool = self.pool
        if pool is not None and not pool.is_closing():
            idle = pool.get_idle_size()
            metrics.pool["in_use"].set(pool.get_size() - idle)
            metrics.pool["idle"].set(idle)
            metrics.pool["waiting"].set(waiting(pool))

    async def _sample_gauges(self) -> None:
        every = min(FLUSH_SECONDS, self.settings.telemetry.metrics_sample_seconds)
        while True:
            self.metrics.flush()
            self.sample_gauges()
            await asyncio.sleep(every)

    async def stop(self) -> None:
        self.metrics.flush()
        # The cache's loads and the limiter's prefetches use Redis too: they end before it is
        # closed, as the worker's own tasks do.
        tasks = [*self.tasks, *self.cache.background(), *self.limiter.background()]
        for task in tasks:
            task.cancel()
        # Bounded: a worker must be gone within its grace, whatever a task or a connection
        # still does (a held connection would keep a graceful pool close waiting for ever).
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_PART_SECONDS)
            if pending:
                log.warning(
                    "gateway: %s still stopping after %.0f s; closing the connections anyway",
                    ", ".join(sorted(task.get_name() for task in pending)),
                    STOP_PART_SECONDS,
                )
        if self.pool is not None:
            try:
                await asyncio.wait_for(self.pool.close(), STOP_PART_SECONDS)
            except TimeoutError:
                log.warning("gateway: the database pool did not close in time; closing it hard")
                self.pool.terminate()
        for client in (self.redis, self.subscriber):
            if client is not None:
                with contextlib.suppress(*REDIS_ERRORS):
                    # Asked for: a pool handed to the client is not closed with it by default.
                    await client.aclose(close_connection_pool=True)

    async def _connect_database(self) -> None:
        try:
            self.pool = await create_pool(
                self.settings, PoolRoad.READER, application_name="gateway"
            )
        except DATABASE_ERRORS as exc:
            log.warning("PostgreSQL does not answer (%s); serving cached copies only", exc)

    async def _keep_connecting(self) -> None:
        while self.pool is None:
            await asyncio.sleep(self.settings.gateway.redis_retry_seconds)
            await self._connect_database()

    async def load_keys(self) -> None:
        """Read the console's keys now. A key turned off stops at once in this worker."""
        if self.pool is None:
            return
        loaded = database_keys(await ApiKeys(self.pool).live(), self.settings)
        if loaded != self.database_keys:
            self.database_keys = loaded
            self.known_keys = {}

    async def _try_load_keys(self, *, failing: bool) -> bool:
        """load_keys; False (said once per outage) when the database cannot answer."""
        try:
            await self.load_keys()
        except DATABASE_ERRORS as exc:
            if not failing:
                log.warning("API keys not read (%s); the last ones read still count", exc)
            return False
        return True

    async def _reload_keys(self, failing: bool) -> None:
        while True:
            await asyncio.sleep(self.settings.gateway.keys_reload_seconds)
            failing = not await self._try_load_keys(failing=failing)

    async def _listen(self) -> None:
        """Drop this worker's copies when the relay says their data changed."""
        assert self.subscriber is not None
        cache = self.cache
        while True:
            try:
                async with self.subscriber.pubsub() as pubsub:
                    await pubsub.subscribe(cache.channel)
                    cache.listening = True
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=1.0
                        )
                        if message is not None:
                            self._invalidate(message["data"])
            except REDIS_ERRORS as exc:
                if cache.listening:
                    log.warning("invalidations stopped (%s); trusting local copies briefly", exc)
                cache.listening = False
                cache.distrust_local()
                await asyncio.sleep(self.settings.gateway.redis_retry_seconds)

    def _invalidate(self, data: bytes) -> None:
        try:
            groups = json.loads(data)["groups"]
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise TypeError("groups is not a list of names")
        except (ValueError, KeyError, TypeError) as exc:
            # Not from our relay: ignore it rather than stop listening.
            log.warning(
                "ignored a message on %s that is not an invalidation: %s", self.cache.channel, exc
            )
            return
        self.cache.invalidate(groups)

    # -- clients and answers -----------------------------------------------------------------

    async def admit(self, request: web.Request) -> web.Response | None:
        """None when the request may go on; else the 401 or 429 to answer. A key is limited
        by its own bucket; without one (or with one not known) the client's address is."""
        key = request.headers.get("X-API-Key")
        if key is None and "token" in request.query:
            by_token = self._token_client(request, request.query["token"])
            if isinstance(by_token, str):
                return await self._refuse(request, 401, by_token)
            client = by_token
        elif key is None:
            if not self.settings.gateway.anonymous_reads:
                return await self._refuse(
                    request, 401, "Send your API key in the X-API-Key header."
                )
            client = self.anonymous.client(client_address(request, self.settings))
        else:
            found = self._key_client(key)
            if found is None:
                return await self._refuse(
                    request, 401, "This API key is not known; check the X-API-Key header."
                )
            client = found
        return await self._take(request, client)

    async def admit_address(
        self, request: web.Request, buckets: AddressBuckets
    ) -> web.Response | None:
        """None when the client's address has room in `buckets`; else the 429 to answer."""
        return await self._take(request, buckets.client(client_address(request, self.settings)))

    def stream_owner(self, request: web.Request) -> str:
        """Whom a live stream counts against: its API key, or its address without one."""
        client: Client | None = request.get(LIMITED)
        if client is not None and client.bucket.startswith("key:"):
            return client.bucket
        return "ip:" + client_address(request, self.settings)

    def _key_client(self, key: str) -> Client | None:
        client = self.known_keys.get(key)
        if client is None:
            digest = hash_key(key)
            client = self.keys.get(digest) or self.database_keys.get(digest)
            if client is not None:
                # Only known keys are kept, so this holds at most one entry per key.
                self.known_keys[key] = client
        return client

    def _token_client(self, request: web.Request, token: str) -> Client | str:
        """The key a live stream's `?token=` stands for; else why it opens nothing."""
        route = request.match_info.route.resource
        if route is None or route.canonical not in LIVE_ROUTES:
            return "A stream token opens live streams only; send X-API-Key with other calls."
        if not self.tokens.secrets:
            return "This server gives no stream tokens; send your key in the X-API-Key header."
        try:
            name = self.tokens.check(token)
        except BadToken as bad:
            return str(bad)
        for client in (*self.keys.values(), *self.database_keys.values()):
            if client.name == name:
                return client
        return "The API key this stream token stands for is no longer allowed."

    async def _refuse(self, request: web.Request, status: int, message: str) -> web.Response:
        """`status` with `message`, counted against the address (429 past it): guessing keys
        costs the guesser's own bucket like any read."""
        over = await self.admit_address(request, self.anonymous)
        return over if over is not None else error_answer(status, message)

    async def _take(self, request: web.Request, client: Client) -> web.Response | None:
        request[LIMITED] = client
        wait = await self.limiter.take(client)
        if wait is None:
            return None
        return error_answer(
            429,
            f"Too many requests for {client.name}; try again after Retry-After seconds.",
            retry_after_seconds=wait,
        )

    async def cached(
        self,
        request: web.Request,
        name: str,
        group: str,
        read: Callable[..., Awaitable[_reads.Loaded]],
        *args: Any,
    ) -> web.Response:
        """Answer from the cache. A fresh copy in memory costs no more than a dict lookup."""
        now = time.time()
        entry = self.cache.local.get(name)
        if entry is not None and now < entry.fresh_until:
            how = HIT
        else:
            key = CacheKey(name, group, lambda conn: read(conn, *args))
            try:
                entry, how = await self.cache.get(key)
            except Unavailable:
                return error_answer(
                    503,
                    "The results database cannot answer right now and this page is not cached. "
                    "Try again in a few seconds.",
                    retry_after_seconds=self.settings.gateway.database_timeout_seconds,
                )
            now = time.time()
        self.metrics.cache(how)
        max_age = max(0, round(entry.fresh_until - now)) if how != STALE else 0
        coding = IDENTITY
        for wanted in acceptable(request.headers.get("Accept-Encoding")):
            if wanted == IDENTITY or (entry.br if wanted == BROTLI else entry.gzip) is not None:
                coding = wanted
                break
        built = entry.headers
        if built is None or entry.headers_for != (how, max_age):
            built = {}
            entry.headers, entry.headers_for = built, (how, max_age)
        headers = built.get(coding)
        if headers is None:
            headers = self._headers(entry, coding, group, how, max_age)
            built[coding] = headers
        match = request.headers.get("If-None-Match")
        if match is not None and entry.status == 200 and _etag_matches(match, headers["ETag"]):
            return web.Response(
                status=304, headers={k: v for k, v in headers.items() if k not in _NOT_ON_304}
            )
        body = entry.body
        if coding == BROTLI and entry.br is not None:
            body = entry.br
        elif coding == GZIP and entry.gzip is not None:
            body = entry.gzip
        return web.Response(body=body, status=entry.status, headers=headers)

    def _headers(
        self, entry: Entry, coding: str, group: str, how: str, max_age: int
    ) -> dict[str, str]:
        headers = {
            "Content-Type": JSON_TYPE,
            "ETag": variant_etag(entry.etag, coding),
            "Cache-Control": (
                f"{self._cache_scope}, max-age={max_age}, s-maxage={max_age}{self._cache_control}"
            ),
            # Every copy is one of several by Accept-Encoding, the plain one too.
            "Vary": "Accept-Encoding",
            # The group the relay invalidates, named for a shared cache to purge by: Fastly's
            # and Akamai's Surrogate-Key, Varnish's xkey.
            "Surrogate-Key": group,
            "xkey": group,
            "X-Cache": how,
        }
        if coding != IDENTITY:
            headers["Content-Encoding"] = coding
        return headers

    async def live_subject(self, event: str, unit: str | None) -> web.Response | None:
        """None when the Games `event` exists (and its unit `unit`, when one is asked for); else
        the 404 to answer, or a 503 when the database cannot say and nothing about them is
        cached. The answers are the cached ones of `/disciplines` and the unit read (a made-up
        code's 404 too, for the negative time to live), so a fan connecting costs a memory hit,
        and a made-up code never gets a stream: it would take a Redis reader of its own."""
        name = "disciplines:" + event
        try:
            found, _ = await self.cache.get(
                CacheKey(name, name, lambda conn: _reads.read_disciplines(conn, event))
            )
            if found.status == 404:
                return no_event(event)
            if unit is not None:
                code = unit
                name = f"unit:{event}:{code}"
                found, _ = await self.cache.get(
                    CacheKey(
                        name, name, lambda conn: _reads.read_unit(conn, event, code, self.held)
                    )
                )
                if found.status == 404:
                    return error_answer(404, f"There is no unit {code} in event {event}.")
        except Unavailable:
            return error_answer(
                503,
                "The results database cannot answer right now, so this stream's event cannot "
                "be checked. Try again after Retry-After seconds.",
                retry_after_seconds=self.settings.gateway.database_timeout_seconds,
            )
        return None

    # -- readiness ---------------------------------------------------------------------------

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        if self.stopping:
            return False, {
                "ready": False,
                "stopping": True,
                "mode": "this copy is stopping; the other copies take its requests",
            }
        database = redis = "down"
        if self.pool is not None and await pool_answers(self.pool):
            database = "ok"
        if self.redis is None:
            redis = "not configured"
        else:
            try:
                await self.redis.ping()
                redis = "ok"
            except PoolExhausted as exc:
                # Answering, only busy: this copy still serves, so it stays in the balancer.
                self.cache.redis_failed(exc)
                redis = "busy"
            except REDIS_ERRORS as exc:
                self.cache.redis_failed(exc)
        if database == "ok" and redis == "busy":
            mode = "Redis pool full: reads that find no connection go to PostgreSQL"
        elif redis == "busy":
            mode = "PostgreSQL is down and the Redis pool full: serving cached copies"
        elif database == "ok" and redis == "ok":
            mode = "every read through Redis and this worker's memory"
        elif database == "ok":
            mode = "Redis is down: reading PostgreSQL directly (with a short local copy), slower"
        elif redis == "ok":
            mode = "PostgreSQL is down: serving cached copies; uncached reads answer 503"
        else:
            mode = "PostgreSQL and Redis are both down: only copies in memory can be served"
        body = {
            "ready": database == "ok" or redis in ("ok", "busy"),
            "database": database,
            "redis": redis,
            "mode": mode,
            "outbox_relay": bool(self.relay and self.relay.leading),
        }
        return bool(body["ready"]), body
