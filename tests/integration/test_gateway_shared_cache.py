"""A real Varnish (deploy/varnish/omnium.vcl) in front of the gateway: hits, variants, purges."""

from __future__ import annotations

import asyncio
import gzip
import re
import time

import asyncpg
import brotli
import httpx
import redis.asyncio as aioredis

from omnium_devstack import free_port
from omnium_devstack.varnish import running_varnish
from omnium_gateway._route_sets import LiveRoutes
from omnium_live import LivePublisher, live_hub
from tests.support.command import running_command
from tests.support.games import EVENT, make_games
from tests.support.gateway import RunningGateway, gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.sse import read_events, reading
from tests.support.waiting import eventually


def gateway_requests(gw: RunningGateway, route: str) -> float:
    return gw.gateway.metrics.requests(route, 200, 304)


async def test_varnish_keeps_reads_and_drops_them_when_a_change_is_saved(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[unit]}"
    varnish_port = free_port()
    async with (
        running_command(database_url) as command,
        running_gateway(
            database_url,
            servers.redis_url,
            gateway_purge_urls=(f"http://127.0.0.1:{varnish_port}/",),
        ) as gw,
        running_varnish(varnish_port, int(gw.url.rsplit(":", 1)[1])) as varnish,
        httpx.AsyncClient(base_url=varnish.url, timeout=10) as http,
    ):
        answer = await command.submit(
            command_id="shared-1",
            code="units.set_fields",
            unit_id=unit,
            payload={"fields": {"status": "OFFICIAL"}, "sides": [{"order": 1, "score": "2"}]},
        )
        assert answer.reason == ""
        await asyncio.sleep(0.3)  # the first change's own purge, before anything is kept
        plain = await http.get(path, headers={"Accept-Encoding": "identity"})
        assert plain.status_code == 200 and plain.headers["X-Cache"] == "MISS"
        assert plain.json()["sides"][0]["score"] == "2"
        found = re.search(r"s-maxage=(\d+)", plain.headers["Cache-Control"])
        assert found is not None and int(found[1]) > 21_000  # final: kept for hours
        # The groups are for the cache, not passed on to browsers.
        assert "xkey" not in plain.headers and "Surrogate-Key" not in plain.headers

        hits = varnish.counter("MAIN.cache_hit")
        seen = gateway_requests(gw, "unit")
        warm = await http.get(path, headers={"Accept-Encoding": "identity"})
        assert warm.headers["X-Cache"] == "HIT"
        assert "Age" in warm.headers
        # The fetch was counted against its client's quota and says so; the copy, against none.
        assert "RateLimit" in plain.headers and "RateLimit-Policy" in plain.headers
        assert "RateLimit" not in warm.headers and "RateLimit-Policy" not in warm.headers
        assert warm.content == plain.content
        assert await varnish.counter_reaches("MAIN.cache_hit", hits + 1) == hits + 1
        assert gateway_requests(gw, "unit") == seen, "the gateway saw a request Varnish had"

        # One copy per coding, each kept: the fetches reach the gateway once each.
        async with http.stream("GET", path, headers={"Accept-Encoding": "gzip"}) as gz:
            gz_raw = b"".join([chunk async for chunk in gz.aiter_raw()])
        async with http.stream("GET", path, headers={"Accept-Encoding": "br, gzip"}) as br:
            br_raw = b"".join([chunk async for chunk in br.aiter_raw()])
        assert gz.headers["Content-Encoding"] == "gzip" and gz.headers["X-Cache"] == "MISS"
        assert br.headers["Content-Encoding"] == "br" and br.headers["X-Cache"] == "MISS"
        assert gzip.decompress(gz_raw) == plain.content
        assert brotli.decompress(br_raw) == plain.content
        again = await http.get(path, headers={"Accept-Encoding": "gzip;q=0.8, br"})
        assert again.headers["X-Cache"] == "HIT" and again.headers["Content-Encoding"] == "br"
        assert gateway_requests(gw, "unit") == seen + 2

        saved_at = time.monotonic()
        await command.submit(
            command_id="shared-2",
            code="results.set_sides",
            unit_id=unit,
            payload={"sides": [{"order": 1, "score": "3"}]},
        )
        shown = None
        while time.monotonic() - saved_at < 1.0:
            now = await http.get(path, headers={"Accept-Encoding": "gzip"})
            if now.json()["sides"][0]["score"] == "3":
                shown = time.monotonic() - saved_at
                break
            await asyncio.sleep(0.02)
        assert shown is not None, "Varnish still served the old score 1 s after the save"
        assert gw.gateway.metrics.value("omnium_gateway_purges_total") >= 1
        # The new copy is kept again, and the other codings were dropped too.
        assert (await http.get(path, headers={"Accept-Encoding": "gzip"})).headers[
            "X-Cache"
        ] == "HIT"
        brotli_now = await http.get(path, headers={"Accept-Encoding": "br"})
        assert brotli_now.json()["sides"][0]["score"] == "3"


async def test_live_streams_and_probes_pass_through_varnish(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    varnish_port = free_port()
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url))
    async with (
        running_gateway(database_url, servers.redis_url, [live]) as gw,
        running_varnish(varnish_port, int(gw.url.rsplit(":", 1)[1])) as varnish,
        httpx.AsyncClient(base_url=varnish.url, timeout=10) as http,
    ):
        seen = gateway_requests(gw, "readyz")
        for _ in range(3):
            assert (await http.get("/readyz")).status_code == 200
        assert gateway_requests(gw, "readyz") == seen + 3
        # Only the relay's own address may purge; a purge must name its groups.
        refused = await http.request("PURGE", "/")
        assert refused.status_code == 400
        # A live stream passes through, unbuffered: an event published reaches the fan.
        listening = asyncio.create_task(
            read_events(f"{varnish.url}/v1/events/{EVENT}/live", 1, within=30)
        )
        await reading(live_hub(gw.app), EVENT, listeners=1)
        redis = aioredis.from_url(servers.redis_url)
        try:
            await LivePublisher(redis, max_length=10).publish(
                EVENT, [{"kind": "unit.changed", "unit": "X", "n": 1}]
            )
        finally:
            await redis.aclose()
        (heard,) = await listening
    assert heard["event"] == "unit.changed" and heard["data"]["n"] == 1


async def test_varnish_keeps_an_answer_the_gateway_served_stale(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    """The gateway says s-maxage=0 for a copy it serves stale (and for one in its last second):
    Varnish keeps it for its grace and refreshes it in the background, rather than sending
    every request for that key to the gateway for two minutes (hit-for-miss)."""
    games = await make_games(db, units=1)
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[0]]}"
    async with (
        running_gateway(
            database_url, servers.redis_url, cache_ttl_scheduled=1, cache_stale_window=30
        ) as gw,
        running_varnish(free_port(), int(gw.url.rsplit(":", 1)[1])) as varnish,
        httpx.AsyncClient(base_url=varnish.url, timeout=10) as http,
    ):
        assert (await gw.get(path)).headers["X-Cache"] == "MISS"
        await asyncio.sleep(1.2)  # past the gateway's time to live, inside its stale window
        first = await http.get(path)
        assert first.status_code == 200
        assert first.headers["X-Gateway-Cache"] == "STALE"
        assert "s-maxage=0" in first.headers["Cache-Control"]
        again = await http.get(path)
        assert again.status_code == 200
        assert again.headers["X-Cache"] == "HIT", "Varnish sent a stale answer's key to the gateway"
        assert again.content == first.content


async def test_varnish_serves_its_copy_when_the_gateway_errs_on_a_refresh(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    """A background refresh the gateway answers 503 (PostgreSQL away and the gateway holding no
    copy) leaves Varnish's copy in place: fans keep getting it, never the error."""
    games = await make_games(db, units=1)
    path = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[0]]}"
    name = database_url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(servers.admin_url)
    try:
        async with (
            running_gateway(
                database_url, servers.redis_url, cache_ttl_scheduled=1, cache_stale_window=30
            ) as gw,
            running_varnish(free_port(), int(gw.url.rsplit(":", 1)[1])) as varnish,
            httpx.AsyncClient(base_url=varnish.url, timeout=10) as http,
        ):
            kept = await http.get(path)
            assert kept.status_code == 200
            await asyncio.sleep(1.2)  # Varnish's copy is in its grace now
            # The gateway forgets its copies and cannot read PostgreSQL: it answers 503.
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            gw.gateway.cache.local.clear()
            redis = aioredis.Redis.from_url(servers.redis_url)
            try:
                keys = [k async for k in redis.scan_iter(gw.settings.gateway.redis_prefix + "*")]
                await redis.delete(*keys)
            finally:
                await redis.aclose()
            errors = gw.gateway.metrics.requests("unit", 503)
            stale = await http.get(path)  # served from grace; refreshed in the background
            assert stale.status_code == 200 and stale.content == kept.content
            await eventually(
                lambda: gw.gateway.metrics.requests("unit", 503) != errors,
                within=15,
                what="the background refresh's 503",
            )
            after = await http.get(path)
            assert after.status_code == 200, "the gateway's error replaced Varnish's copy"
            assert after.content == kept.content and after.headers["X-Cache"] == "HIT"
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()
