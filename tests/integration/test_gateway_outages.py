"""Redis or PostgreSQL going away: the gateway keeps answering, never with a 500."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from omnium.command.v1 import command_pb2
from omnium_devstack import RedisServer, free_port
from omnium_gateway._cache import Cache
from omnium_gateway._gateway import redis_client
from omnium_gateway._metrics import Metrics
from omnium_gateway._outbox import OutboxRelay
from tests.support.command import running_command
from tests.support.games import EVENT, make_games
from tests.support.gateway import gateway_process, gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.waiting import eventually

OPEN = {"gateway_anonymous_rate_per_second": "1000000", "gateway_anonymous_burst": "1000000"}
OPEN_IN_PROCESS = {"gateway_anonymous_rate_per_second": 1e6, "gateway_anonymous_burst": 1_000_000}


async def test_redis_stopped_mid_test_answers_keep_coming(
    database_url: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    games = await make_games(db, units=5)
    paths = [f"/v1/events/{EVENT}/units/{games.unit_codes[u]}" for u in games.units]
    paths += [f"/v1/events/{EVENT}/schedule", f"/v1/events/{EVENT}/medals", "/v1/events"]
    redis = RedisServer(tmp_path / "redis", port=free_port())
    redis.start()
    try:
        with gateway_process(database_url, redis.redis_url, gateway_workers="2", **OPEN) as gw:
            async with (
                httpx.AsyncClient(base_url=gw.url, timeout=10) as http,
                running_command(database_url) as command,
            ):
                for path in paths:
                    assert (await http.get(path)).status_code == 200
                assert (await http.get("/readyz")).json()["redis"] == "ok"
                redis.stop()
                codes: set[int] = set()
                for _ in range(5):
                    answers = await asyncio.gather(*(http.get(p) for p in paths * 4))
                    codes |= {a.status_code for a in answers}
                assert codes == {200}
                ready = await http.get("/readyz")
                assert ready.status_code == 200
                assert ready.json()["redis"] == "down"
                assert "reading PostgreSQL directly" in ready.json()["mode"]
                # Without Redis a worker keeps its own copy only briefly: changes still show.
                await command.submit(
                    command_id="no-redis-1",
                    code="results.set_status",
                    unit_id=games.units[0],
                    payload={"status": "RUNNING"},
                )

                async def first_status() -> str:
                    unit = await http.get(paths[0])
                    assert unit.status_code == 200
                    return str(unit.json()["status"])

                async def redis_state() -> str:
                    return str((await http.get("/readyz")).json()["redis"])

                await eventually(first_status, "RUNNING", within=5, what="the unit's new status")
                redis.start()  # same port: the workers find it again
                await eventually(redis_state, "ok", within=10, every=0.1, what="Redis in /readyz")
                assert {(await http.get(p)).status_code for p in paths} == {200}
    finally:
        redis.stop()


async def test_database_down_serves_cached_copies_and_503_for_misses(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    cached = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[0]]}"
    uncached = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[1]]}"
    name = database_url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(servers.admin_url)
    try:
        async with running_gateway(
            database_url, servers.redis_url, cache_ttl_scheduled=1, cache_stale_window=0
        ) as gw:
            first = await gw.get(cached)
            assert first.status_code == 200
            # The database refuses the gateway: new connections and the open ones alike.
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            await asyncio.sleep(1.2)  # past its time to live and stale window: stale-if-error
            gw.gateway.cache.local.clear()  # and only Redis has it
            again = await gw.get(cached)
            assert again.status_code == 200
            assert again.content == first.content
            assert again.headers["X-Cache"] == "STALE"
            missing = await gw.get(uncached)
            assert missing.status_code == 503
            assert "cannot answer" in missing.json()["error"]
            assert missing.headers["Retry-After"] == "5"
            ready = (await gw.get("/readyz")).json()
            assert ready["database"] == "down" and ready["ready"]
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await eventually(
                lambda: gw.get(uncached),
                until=lambda answer: answer.status_code == 200,
                within=5,
                every=0.1,
                what="a read once the database takes connections again",
            )
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()


async def test_relay_keeps_its_lease_and_catches_up_when_redis_is_slow(
    database_url: str, db: asyncpg.Connection, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis too slow to take the relay's writes for a while (CLIENT PAUSE WRITE, on a Redis of
    the test's own): the relay's calls time out, it keeps leading, and every change saved
    meanwhile reaches the caches once Redis answers."""
    caplog.set_level(logging.INFO, logger="omnium_gateway")
    games = await make_games(db, units=3)
    paths = [f"/v1/events/{EVENT}/units/{games.unit_codes[u]}" for u in games.units]
    redis = RedisServer(tmp_path / "redis", port=free_port())
    redis.start()
    admin = aioredis.Redis.from_url(redis.redis_url)
    try:
        async with (
            running_command(database_url) as command,
            running_gateway(
                database_url, redis.redis_url, gateway_redis_timeout_seconds=0.3, **OPEN_IN_PROCESS
            ) as gw,
        ):
            for path in paths:
                assert (await gw.get(path)).json()["status"] == "SCHEDULED"
            relay = gw.gateway.relay
            assert relay is not None and relay.leading
            led: list[bool] = []

            async def watch() -> None:
                while True:
                    led.append(relay.leading)
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            await admin.execute_command("CLIENT", "PAUSE", "30000", "WRITE")
            try:
                for n, unit in enumerate(games.units):
                    answer = await command.submit(
                        command_id=f"slow-redis-{n}",
                        code="results.set_status",
                        unit_id=unit,
                        payload={"status": "RUNNING"},
                    )
                    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
                # Several of the relay's 0.3 s timeouts while the changes wait in the outbox.
                await asyncio.sleep(1.2)
            finally:
                await admin.execute_command("CLIENT", "UNPAUSE")

            async def statuses() -> list[str]:
                return [(await gw.get(p)).json()["status"] for p in paths]

            try:
                await eventually(
                    statuses, ["RUNNING"] * len(paths), within=5, what="every change in the caches"
                )
            finally:
                watcher.cancel()
            assert all(led) and relay.leading
            metrics = gw.gateway.metrics
            assert metrics.value("omnium_gateway_relay_redis_retries_total") > 0
            # The relay never stood down, and its lag shows the changes that waited for Redis.
            assert metrics.value("omnium_gateway_relay_stops_total") == 0
            assert metrics.value("omnium_gateway_relay_lag_seconds_count") > 0
            assert metrics.value("omnium_gateway_relay_lag_seconds_bucket", le="0.5") < (
                metrics.value("omnium_gateway_relay_lag_seconds_count")
            )
            assert "outbox relay stopped" not in caplog.text
            newest = await db.fetchval("SELECT max(id) FROM domain_event")
            assert relay.watermark == newest
    finally:
        await admin.aclose()
        redis.stop()


async def test_reads_go_around_a_full_redis_pool_without_calling_redis_down(
    database_url: str, servers: Servers, db: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Every connection of the worker's Redis pool busy (here its only one, held): each read
    answers 200 from PostgreSQL, Redis is not declared down for the worker, and the full pool
    is said once, not once a request."""
    caplog.set_level(logging.INFO, logger="omnium_gateway")
    games = await make_games(db, units=5)
    paths = [f"/v1/events/{EVENT}/units/{games.unit_codes[u]}" for u in games.units]
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_redis_connections=1,
        gateway_redis_timeout_seconds=0.2,
        **OPEN_IN_PROCESS,
    ) as gw:
        gateway = gw.gateway
        assert gateway.redis is not None
        pool = gateway.redis.connection_pool
        held = await pool.get_connection()
        try:
            answers = [await gw.get(path) for path in paths]
            assert [a.status_code for a in answers] == [200] * len(paths)
            assert {a.headers["X-Cache"] for a in answers} == {"MISS"}
            assert gateway.cache.redis_up
            assert gateway.metrics.value("omnium_gateway_redis_busy_total") >= len(paths)
            ready = await gw.get("/readyz")
            assert ready.status_code == 200 and ready.json()["redis"] == "busy"
        finally:
            await pool.release(held)
        assert "Redis did not answer" not in caplog.text
        assert caplog.text.count("Redis pool full") == 1
        # Its copies were this worker's alone, kept briefly: Redis fills once the pool frees.
        gateway.cache.local.clear()
        again = await gw.get(paths[0])
        assert again.status_code == 200 and again.headers["X-Cache"] == "MISS"
        assert (await gw.get("/readyz")).json()["redis"] == "ok"


async def test_relay_reads_a_late_row_again_when_redis_failed_its_batch(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    """An outbox row committed after a later one (a gap the relay waits for) that arrives in a
    batch Redis does not take is read again with the next try, not skipped."""
    games = await make_games(db, units=2)
    late_unit, early_unit = games.units
    late_code = games.unit_codes[late_unit]
    settings = gateway_settings(database_url, servers.redis_url)
    good = redis_client(servers.redis_url, settings, "test-relay", 4)
    # A real client of a port nothing listens on: each call fails at once, as Redis gone.
    dead = redis_client(f"redis://127.0.0.1:{free_port()}", settings, "test-relay-dead", 1)
    cache = Cache(settings, good, Metrics(), lambda: None)
    relay = OutboxRelay(settings, good, cache)
    insert = (
        "INSERT INTO domain_event (event_id, kind, subject_kind, subject_id, unit_id, seq, "
        "command_id, payload) VALUES ($1, 'unit.updated', 'unit', $2, $2, 1, $3, $4::jsonb)"
    )
    head = await db.fetchval("SELECT coalesce(max(id), 0) FROM domain_event")
    late = await asyncpg.connect(database_url)
    reader = await asyncpg.connect(database_url)
    try:
        open_transaction = late.transaction()
        await open_transaction.start()
        # The late row takes its id first and commits after the early one.
        payload = json.dumps({"code": late_code})
        await late.execute(insert, games.event_id, late_unit, "late", payload)
        payload = json.dumps({"code": games.unit_codes[early_unit]})
        await db.execute(insert, games.event_id, early_unit, "early", payload)
        gaps: dict[int, float] = {}
        watermark = await relay._relay(reader, head, gaps)
        assert list(gaps) == [head + 1]
        await open_transaction.commit()
        relay.redis = dead
        with pytest.raises(RedisConnectionError):
            await relay._relay(reader, watermark, gaps)
        relay.redis = good
        await relay._relay(reader, watermark, gaps)
        assert await good.get(cache.gen_key(f"unit:{EVENT}:{late_code}")) == b"1"
    finally:
        await late.close()
        await reader.close()
        await good.aclose(close_connection_pool=True)
        await dead.aclose(close_connection_pool=True)
