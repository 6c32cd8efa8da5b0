"""The cache: time to live by state, stale while one refresh runs, one read per key, changes."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis

from omnium_gateway._cache import MISS, Cache, CacheKey
from omnium_gateway._metrics import Metrics
from omnium_gateway._reads import Loaded
from tests.support.command import running_command
from tests.support.games import EVENT, make_games
from tests.support.gateway import gateway_process, gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.waiting import eventually

OPEN = {"gateway_anonymous_rate_per_second": 1e6, "gateway_anonymous_burst": 1_000_000}


def max_age(answer: httpx.Response) -> int:
    found = re.search(r"max-age=(\d+)", answer.headers["Cache-Control"])
    assert found is not None
    return int(found[1])


async def test_time_to_live_follows_the_state(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=3)
    scheduled, live, final = (games.unit_codes[u] for u in games.units)
    await db.execute("UPDATE unit SET status = 'RUNNING' WHERE code = $1", live)
    await db.execute("UPDATE unit SET status = 'OFFICIAL' WHERE code = $1", final)
    async with running_gateway(database_url, servers.redis_url) as gw:
        unit = f"/v1/events/{EVENT}/units/"
        assert 55 <= max_age(await gw.get(unit + scheduled)) <= 60
        assert max_age(await gw.get(unit + live)) <= 3
        assert 21_590 <= max_age(await gw.get(unit + final)) <= 21_600
        assert 3_590 <= max_age(await gw.get("/v1/events")) <= 3_600
        assert 55 <= max_age(await gw.get(f"/v1/events/{EVENT}/medals")) <= 60
        assert max_age(await gw.get(f"/v1/events/{EVENT}/schedule")) <= 3  # one unit is live
        ends = f"/v1/events/{EVENT}/schedule?status=OFFICIAL"
        assert max_age(await gw.get(ends)) >= 21_590
        # Redis keeps each copy for its time to live, then the stale and stale-if-error windows.
        redis = aioredis.Redis.from_url(servers.redis_url)
        try:
            ttl = await redis.pttl(gw.settings.gateway.redis_prefix + f"e:unit:{EVENT}:{live}")
        finally:
            await redis.aclose()
        assert ttl > 86_000_000


async def test_stale_copy_served_while_one_refresh_runs(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[0]]}"
    async with running_gateway(
        database_url, servers.redis_url, cache_ttl_scheduled=1, **OPEN
    ) as gw:
        first = await gw.get(path)
        assert first.headers["X-Cache"] == "MISS"
        await asyncio.sleep(1.2)
        reads = gw.gateway.metrics.db_reads()
        # Hold the refresh inside PostgreSQL: it waits on this lock while the copy goes stale.
        blocker = await asyncpg.connect(database_url)
        transaction = blocker.transaction()
        await transaction.start()
        await blocker.execute("LOCK TABLE unit IN ACCESS EXCLUSIVE MODE")
        try:
            answers = await asyncio.gather(*(gw.get(path) for _ in range(50)))
            assert {a.headers["X-Cache"] for a in answers} == {"STALE"}
            assert {a.content for a in answers} == {first.content}
            assert {max_age(a) for a in answers} == {0}
            assert len(gw.gateway.cache.refreshing) == 1
        finally:
            await transaction.rollback()
            await blocker.close()
        refresh = next(iter(gw.gateway.cache.refreshing.values()), None)
        if refresh is not None:
            await refresh
        assert gw.gateway.metrics.db_reads() == reads + 1
        assert (await gw.get(path)).headers["X-Cache"] == "HIT"


class FillsAfterFirstLook:
    """A Redis client for one worker that, just after that worker's first look at the cache
    finds nothing, lets another worker fill the key and let go of its lock: the interleaving a
    busy machine makes now and then, made every time. Every call goes to the real Redis."""

    def __init__(self, redis: aioredis.Redis, other: Cache, key: CacheKey) -> None:
        self.redis, self.other, self.key = redis, other, key
        self.looked = False

    async def mget(self, *keys: str) -> Any:
        found = await self.redis.mget(*keys)
        if not self.looked:
            self.looked = True
            assert found[0] is None
            await self.other.get(self.key)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.redis, name)


async def test_a_key_filled_between_a_look_and_the_lock_is_not_read_again(
    database_url: str, servers: Servers
) -> None:
    settings = gateway_settings(database_url, servers.redis_url)
    redis = aioredis.Redis.from_url(servers.redis_url)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    reads = 0

    async def read(conn: asyncpg.Connection) -> Loaded:
        nonlocal reads
        reads += 1
        return Loaded(200, str(await conn.fetchval("SELECT now()")).encode(), "scheduled")

    key = CacheKey("unit:cold", "g", read)
    try:
        first = Cache(settings, redis, Metrics(), lambda: pool)
        second = Cache(settings, redis, Metrics(), lambda: pool)
        second.redis = FillsAfterFirstLook(redis, first, key)  # type: ignore[assignment]
        entry, served = await second.get(key)
        assert served == MISS
        assert reads == 1, "the second worker read the database for a key already filled"
        assert entry.body == (await first.get(key))[0].body
        assert await redis.exists(second._keys(key)[2]) == 0, "the fill lock was not let go"
    finally:
        await pool.close()
        await redis.aclose()


async def test_500_requests_for_one_cold_key_cause_one_read(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=20)
    # A waiter still waiting when the fill lock runs out reads for itself (by design: a stuck
    # filler must not stall everyone). On a machine busy enough that 500 answers take over 5 s,
    # that is an extra read this test is not about: the lock outlasts the test here.
    settings = {k: str(v) for k, v in OPEN.items()} | {
        "gateway_fill_lock_seconds": "60",
        "gateway_public_metrics": "true",
    }
    with gateway_process(database_url, servers.redis_url, gateway_workers="2", **settings) as gw:
        limits = httpx.Limits(max_connections=500)
        async with httpx.AsyncClient(base_url=gw.url, timeout=30, limits=limits) as http:
            assert (await http.get("/readyz")).status_code == 200
            for unit in games.units[:3]:
                path = f"/v1/events/{EVENT}/units/{games.unit_codes[unit]}"
                answers = await asyncio.gather(*(http.get(path) for _ in range(500)))
                assert {a.status_code for a in answers} == {200}
                assert len({a.content for a in answers}) == 1
            metrics = (await http.get("/metrics")).text
    reads = re.findall(r'omnium_gateway_db_reads_total\{ttl_class="(\w+)"\} (\d+)', metrics)
    assert dict(reads)["scheduled"] == "3", metrics
    assert sum(int(n) for _, n in reads) == 3


async def test_saved_change_visible_within_a_second_even_for_final_results(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[unit]}"
    async with (
        running_command(database_url) as command,
        running_gateway(database_url, servers.redis_url) as gw,
    ):
        answer = await command.submit(
            command_id="final-1",
            code="units.set_fields",
            unit_id=unit,
            payload={"fields": {"status": "OFFICIAL"}, "sides": [{"order": 1, "score": "2"}]},
        )
        assert answer.reason == ""
        await asyncio.sleep(0.3)  # the first change's own invalidation, before we cache
        before = await gw.get(path)
        assert before.json()["sides"][0]["score"] == "2"
        assert max_age(before) > 21_000  # cached for hours
        schedule = await gw.get(f"/v1/events/{EVENT}/schedule")
        saved_at = time.monotonic()
        await command.submit(
            command_id="final-2",
            code="results.set_sides",
            unit_id=unit,
            payload={"sides": [{"order": 1, "score": "3"}]},
        )
        seen = None
        while time.monotonic() - saved_at < 1.0:
            now = await gw.get(path)
            if now.json()["sides"][0]["score"] == "3":
                seen = time.monotonic() - saved_at
                break
            await asyncio.sleep(0.02)
        assert seen is not None, "the saved score did not show within 1 s"
        fresh = await gw.get(f"/v1/events/{EVENT}/schedule")
        assert fresh.content != schedule.content
        other = await gw.get(f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[1]]}")
        assert other.status_code == 200


async def test_a_stray_message_on_the_channel_does_not_stop_invalidations(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[unit]}"
    async with (
        running_command(database_url) as command,
        running_gateway(database_url, servers.redis_url) as gw,
    ):
        assert (await gw.get(path)).json()["status"] == "SCHEDULED"
        redis = aioredis.Redis.from_url(servers.redis_url)
        try:
            await redis.publish(gw.gateway.cache.channel, b"not json")
            await redis.publish(gw.gateway.cache.channel, b'{"groups": 3}')
        finally:
            await redis.aclose()
        await command.submit(
            command_id="stray-1",
            code="results.set_status",
            unit_id=unit,
            payload={"status": "DELAYED"},
        )

        async def status() -> str:
            return str((await gw.get(path)).json()["status"])

        await eventually(status, "DELAYED", within=2, every=0.02, what="the unit's new status")
