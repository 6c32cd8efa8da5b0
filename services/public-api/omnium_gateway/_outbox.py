"""The outbox relay: one gateway worker, elected in Redis, turns saved changes into invalidations.

Why one elected relay and not every worker listening to PostgreSQL: the database then sees one
LISTEN connection and one outbox read per change however many workers and copies run, and a
group's generation is bumped once per change. The relay holds a Redis lease it renews; if it
dies, another worker takes over within the lease and carries on from the watermark kept in Redis.

The relay has Redis connections of its own and closes them itself when it stops, after its lease
renewer has ended: a worker's stop that is bounded in time may give up waiting for the relay, and
closing a pool under a relay still at work would let redis-py drop a socket it just opened
without closing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Iterable

import asyncpg
import redis.asyncio as aioredis

from omnium_db import DATABASE_ERRORS, NotifyListener, connect_primary
from omnium_gateway._cache import REDIS_ERRORS, Cache
from omnium_gateway._purge import SharedCachePurge
from omnium_gateway._sql import QUERIES
from omnium_settings import Settings
from omnium_telemetry import continued_span

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "omnium_domain_event"
#: The outbox row a client's checker switched on or off writes (migration 0021).
CHECKER_CHANGED = "checker.changed"
LEASE_SECONDS = 5.0
# A Redis call of the relay that failed is tried again this much later, in place.
REDIS_RETRY_SECONDS = 0.1
BATCH_ROWS = 1000
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


def groups_for(kind: str, event: str, code: str | None, *, medal: bool = False) -> set[str]:
    """The cache groups one outbox row touches; `medal`: it changes a side's medal."""
    # An approval changes what a unit the checker holds shows (its results as approved).
    if kind.startswith("unit.") or kind == "results.approved":
        groups = {f"schedule:{event}", f"unit:{event}:{code}"}
        if kind == "unit.created":
            groups.add(f"disciplines:{event}")
        # A medal saved or approved may hold or free the medal table (the checker step).
        if medal or kind == "results.approved":
            groups.add(f"medals:{event}")
        return groups
    if kind.startswith("medal_row."):
        return {f"medals:{event}"}
    # Anything else the road learns to write: drop the event's lists, the cheap safe answer.
    return {f"schedule:{event}", f"medals:{event}", f"disciplines:{event}", "events"}


async def publish(redis: aioredis.Redis, cache: Cache, groups: Iterable[str]) -> None:
    """Bump each group's generation, then tell every worker to drop its copies."""
    names = sorted(groups)
    if not names:
        return
    async with redis.pipeline(transaction=True) as pipe:
        for group in names:
            pipe.incr(cache.gen_key(group))
        pipe.publish(cache.channel, json.dumps({"groups": names}))
        await pipe.execute()


class OutboxRelay:
    """Run in every worker; only the one holding the lease reads the outbox."""

    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis,
        cache: Cache,
        purge: SharedCachePurge | None = None,
    ) -> None:
        """`redis` is the relay's own client (and pool), which `run` closes when it ends."""
        self.settings = settings
        self.redis = redis
        self.cache = cache
        self.purge = purge
        self.token = secrets.token_hex(8)
        self.leading = False
        self.failing = False
        # The outbox id this worker has relayed up to, while it leads and reads; None until the
        # relay has read the outbox head (changes saved before that are not its to relay).
        self.watermark: int | None = None
        self._renew = redis.register_script(_RENEW)
        self._wake = asyncio.Event()
        self.leader_key = cache.prefix + "relay:leader"
        self.watermark_key = cache.prefix + "relay:watermark"

    async def run(self) -> None:
        try:
            await self._contend()
        finally:
            # Shielded: a second cancel must not leave the relay's sockets open.
            await asyncio.shield(self._close_redis())

    async def _close_redis(self) -> None:
        with contextlib.suppress(*REDIS_ERRORS):
            await self.redis.aclose(close_connection_pool=True)

    async def _contend(self) -> None:
        lease_ms = int(LEASE_SECONDS * 1000)
        while True:
            try:
                won = await self.redis.set(self.leader_key, self.token, nx=True, px=lease_ms)
            except REDIS_ERRORS:
                won = False
            if not won:
                await asyncio.sleep(LEASE_SECONDS / 5)
                continue
            self.leading = True
            try:
                await self._lead(lease_ms)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Once per outage, not once a second while PostgreSQL or Redis is away.
                log.log(
                    logging.INFO if self.failing else logging.WARNING,
                    "outbox relay stopped (%s); trying again",
                    exc,
                )
                self.failing = True
                self.cache.metrics.add("omnium_gateway_relay_stops")
                await asyncio.sleep(self.settings.gateway.redis_retry_seconds)
            finally:
                self.leading = False
                self.watermark = None
                with contextlib.suppress(*REDIS_ERRORS):
                    await self.redis.eval(
                        "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                        "return redis.call('DEL', KEYS[1]) end return 0",
                        1,
                        self.leader_key,
                        self.token,
                    )

    async def _lead(self, lease_ms: int) -> None:
        settings = self.settings
        renewer = asyncio.create_task(self._keep_lease(lease_ms))
        # Its own connection for the NOTIFYs, probed while it waits, so a dead one is noticed
        # then too; back from an outage it wakes this loop, which reads on from the watermark.
        listener = NotifyListener(
            settings,
            {NOTIFY_CHANNEL: self._notified},
            name="gateway relay",
            on_reconnect=self._wake.set,
        )
        reader: asyncpg.Connection | None = None
        try:
            await listener.start()
            reader = await self._connect()
            stored = await self.redis.get(self.watermark_key)
            watermark = (
                int(stored) if stored is not None else await reader.fetchval(QUERIES["outbox_head"])
            )
            gaps: dict[int, float] = {}
            self.watermark = watermark
            log.info("this worker relays the outbox to the cache from id %d", watermark)
            self.failing = False
            while not renewer.done():
                self._wake.clear()
                try:
                    if reader is None or reader.is_closed():
                        reader = await self._connect()
                    watermark = self.watermark = await self._relay(reader, watermark, gaps)
                    self.failing = False
                except DATABASE_ERRORS as exc:
                    # The lease and the watermark stay: PostgreSQL is read again on the next
                    # NOTIFY, the listener's reconnect, or the poll, whichever comes first.
                    if not self.failing:
                        log.warning("outbox relay cannot read PostgreSQL (%s); waiting", exc)
                    self.failing = True
                    if reader is not None:
                        reader.terminate()
                        reader = None
                except REDIS_ERRORS as exc:
                    # Redis slow under load (a timeout) or gone for a moment: the relay keeps
                    # its lease (the renewer gives it up only once it has lapsed) and reads the
                    # same rows again from the same watermark, so invalidations queue in the
                    # outbox and catch up; stopping would leave every cache stale meanwhile.
                    self.cache.metrics.add("omnium_gateway_relay_redis_retries")
                    if not self.failing:
                        log.warning(
                            "outbox relay: Redis did not take an invalidation (%s); trying "
                            "again from outbox id %d",
                            exc,
                            watermark,
                        )
                    self.failing = True
                    await asyncio.sleep(REDIS_RETRY_SECONDS)
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(settings.gateway.outbox_poll_seconds):
                        await self._wake.wait()
            renewer.result()
        finally:
            renewer.cancel()
            await _ended(renewer)
            # The reader first: closing the listener raises again if we are being cancelled.
            if reader is not None:
                reader.terminate()
            await listener.close()

    def _notified(self, _payload: str) -> None:
        self._wake.set()

    async def _connect(self) -> asyncpg.Connection:
        settings = self.settings
        # Every read is bounded: a machine that went away must not hold the relay forever.
        return await connect_primary(
            settings,
            command_timeout=settings.gateway.database_timeout_seconds,
            server_settings={"application_name": "gateway relay"},
        )

    async def _keep_lease(self, lease_ms: int) -> None:
        # The lease runs from when Redis last renewed it; a renewal that fails (Redis slow
        # under load) is tried again while the lease still holds, and only a lease that has
        # lapsed, or gone to another worker, ends this relay's turn.
        held_until = time.monotonic() + LEASE_SECONDS
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            while True:
                asked = time.monotonic()
                try:
                    renewed = await self._renew(keys=[self.leader_key], args=[self.token, lease_ms])
                    break
                except REDIS_ERRORS:
                    self.cache.metrics.add("omnium_gateway_relay_redis_retries")
                    if time.monotonic() + REDIS_RETRY_SECONDS >= held_until:
                        raise
                    await asyncio.sleep(REDIS_RETRY_SECONDS)
            if not renewed:
                raise RuntimeError("the relay lease went to another worker")
            held_until = asked + LEASE_SECONDS

    async def _relay(self, conn: asyncpg.Connection, watermark: int, gaps: dict[int, float]) -> int:
        while True:
            rows = await conn.fetch(
                *QUERIES.bind(
                    "outbox_since", watermark=watermark, gaps=list(gaps), limit=BATCH_ROWS
                )
            )
            if not rows:
                break
            read_at = time.monotonic()
            # The gaps move on only once these rows' invalidations are in Redis: a gap that
            # showed up in a batch Redis did not take must be read again with it.
            pending = dict(gaps)
            top = _track_gaps({row["id"] for row in rows}, watermark, pending)
            groups = await _groups_of(conn, rows)
            # The invalidation continues the trace of the first change it covers (linked to
            # the others'): a trace shows when each cache let go of the old answer.
            with continued_span(
                "gateway.relay",
                [row["trace_context"] for row in rows],
                attributes={"omnium.relay.rows": len(rows), "omnium.relay.groups": len(groups)},
            ):
                await publish(self.redis, self.cache, groups)
                if self.purge is not None:
                    # After the generations moved: a shared cache that fetches again gets new
                    # data.
                    self.purge.request(groups)
            gaps.clear()
            gaps.update(pending)
            watermark = max(watermark, top)
            await self.redis.set(self.watermark_key, watermark)
            self.cache.metrics.add("omnium_gateway_outbox_rows", len(rows))
            # The oldest change's age when read, plus what publishing it took: a Redis that is
            # slow, or tried again in place, shows here as lag, never as a stopped relay.
            oldest = max(row["age"] for row in rows)
            self.cache.metrics.relay_lag(max(0.0, oldest) + time.monotonic() - read_at)
            if len(rows) < BATCH_ROWS:
                break
        horizon = time.monotonic() - 3 * self.settings.database.people_transaction_seconds
        for gap in [g for g, at in gaps.items() if at < horizon]:
            del gaps[gap]
        return watermark


async def _ended(task: asyncio.Task[None]) -> None:
    """Wait until a cancelled task has ended, whatever it raised; also through a cancel of our
    own, which is raised once the task is over (the relay must not close its connections
    while its renewer still uses them)."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    if not task.cancelled():
        task.exception()  # retrieved: a renewer that failed as it was stopped is not news
    if cancelled:
        raise asyncio.CancelledError


def _track_gaps(seen: set[int], watermark: int, gaps: dict[int, float]) -> int:
    """Forgets the gaps that showed up, notes the new ones; the newest id read."""
    for gap in seen & gaps.keys():
        del gaps[gap]
    top = max(seen)
    now = time.monotonic()
    # Ids below the newest one read that are not there yet belong to transactions still
    # open (or rolled back): read them again until they show up or age out.
    if top - watermark <= 10 * BATCH_ROWS:
        for missing in range(watermark + 1, top):
            if missing not in seen and missing not in gaps:
                gaps[missing] = now
    return top


async def _groups_of(conn: asyncpg.Connection, rows: list[asyncpg.Record]) -> set[str]:
    """The cache groups the outbox rows change; a competitor's are those of its units."""
    groups: set[str] = set()
    competitors: list[str] = []
    checked: set[str] = set()
    for row in rows:
        if row["subject_kind"] == "competitor":
            competitors.append(row["subject_id"])
        if row["kind"] == CHECKER_CHANGED:
            checked.add(row["event"])
        groups |= groups_for(row["kind"], row["event"], row["code"], medal=row["medal"])
    if competitors:
        for unit in await conn.fetch(QUERIES["units_of_competitors"], competitors):
            groups.add(f"unit:{unit['event']}:{unit['code']}")
    if checked:
        # A checker switched on holds results every cached copy of the Games may show (kept
        # up to 6 h): drop each unit's copy along with the Games' lists, at once.
        for unit in await conn.fetch(QUERIES["units_of_events"], sorted(checked)):
            groups.add(f"unit:{unit['event']}:{unit['code']}")
    return groups
