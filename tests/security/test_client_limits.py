"""The public gateway's limits key on the fan's real address (X-Forwarded-For believed only from
OMNIUM_TRUSTED_PROXIES), stay bounded in memory, cover every public route, and cap the live
streams one client holds."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx

from omnium_gateway import LiveRoutes, ScorerRoutes
from omnium_gateway._cache import Cache
from omnium_gateway._gateway import redis_client
from omnium_gateway._limits import Client, RateLimiter
from omnium_gateway._metrics import Metrics
from omnium_live import live_hub
from tests.support.games import make_event
from tests.support.gateway import RunningGateway, gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.waiting import eventually

# The test's own client connects from 127.0.0.1: the gateway treats it as our proxy.
PROXY = ("127.0.0.1/32",)
# Slow refills: within a test, a bucket holds its burst and nothing comes back.
SLOW = 0.01


def fan(address: str) -> dict[str, str]:
    """What our proxy sends on for a fan at `address`."""
    return {"X-Forwarded-For": address}


async def statuses(gw: RunningGateway, path: str, n: int, **kwargs: Any) -> list[int]:
    return [(await gw.get(path, **kwargs)).status_code for _ in range(n)]


@contextlib.asynccontextmanager
async def stranger(url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client that reaches the gateway directly, from an address that is no proxy of ours."""
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=10) as http:
        yield http


async def test_behind_a_trusted_proxy_each_fan_has_its_own_bucket_and_a_stranger_cannot_pick_one(
    database_url: str, servers: Servers
) -> None:
    async with running_gateway(
        database_url,
        servers.redis_url,
        trusted_proxies=PROXY,
        gateway_anonymous_rate_per_second=SLOW,
        gateway_anonymous_burst=3,
    ) as gw:
        first = await statuses(gw, "/v1/events", 4, headers=fan("198.51.100.1"))
        assert first == [200, 200, 200, 429]
        # Another fan behind the same proxy: a bucket of its own, not the proxy's.
        assert await statuses(gw, "/v1/events", 2, headers=fan("198.51.100.2")) == [200] * 2
        # Someone who is not our proxy writes the header itself, a new address each time, or
        # that fan's: it is counted by its own connection's address all the same.
        async with stranger(gw.url) as http:
            forged = [f"203.0.113.{n}" for n in range(3)] + ["198.51.100.2"] * 2
            codes = [(await http.get("/v1/events", headers=fan(a))).status_code for a in forged]
        assert codes == [200, 200, 200, 429, 429]
        # The fan's last read is still there.
        assert await statuses(gw, "/v1/events", 2, headers=fan("198.51.100.2")) == [200, 429]


async def test_the_limit_tables_stay_at_their_cap_while_addresses_cycle(
    database_url: str, servers: Servers
) -> None:
    async with running_gateway(
        database_url, servers.redis_url, trusted_proxies=PROXY, gateway_rate_clients=20
    ) as gw:
        for n in range(120):
            answer = await gw.get("/v1/events", headers=fan(f"10.9.{n // 250}.{n % 250}"))
            assert answer.status_code == 200
            # The probes' and the document's buckets are bounded the same way.
            assert (await gw.get("/healthz", headers=fan(f"10.8.0.{n}"))).status_code == 200
        gateway = gw.gateway
        assert len(gateway.limiter.leases) == 20
        assert len(gateway.anonymous.clients) == 20
        assert len(gateway.other.clients) == 20
        # The newest are kept, the oldest forgotten.
        assert "other:10.8.0.119" in gateway.limiter.leases
        assert "ip:10.9.0.0" not in gateway.limiter.leases
        # A forgotten fan is simply counted again (Redis still holds its bucket).
        assert (await gw.get("/v1/events", headers=fan("10.9.0.0"))).status_code == 200
        assert len(gateway.limiter.leases) == 20


async def test_the_console_the_providers_the_probes_and_unknown_paths_are_limited_per_address(
    database_url: str, servers: Servers
) -> None:
    options: dict[str, Any] = {
        "trusted_proxies": PROXY,
        "gateway_console_rate_per_second": SLOW,
        "gateway_console_burst": 3,
        "gateway_other_rate_per_second": SLOW,
        "gateway_other_burst": 3,
    }
    scorer = ScorerRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with running_gateway(
        database_url, servers.redis_url, route_sets=[scorer], **options
    ) as gw:
        venue = fan("198.51.100.20")
        assert (await gw.get("/score/", headers=venue)).status_code == 200
        assert (await gw.get("/score/api/me", headers=venue)).status_code == 401
        pushed = await gw.http.post("/v1/providers/feed/messages", headers=venue, json={})
        assert pushed.status_code != 429
        over = await gw.get("/score/", headers=venue)
        assert over.status_code == 429
        assert int(over.headers["Retry-After"]) >= 1
        assert "scorer console" in over.json()["error"]
        over = await gw.http.post("/v1/providers/feed/messages", headers=venue, json={})
        assert over.status_code == 429
        # The console's bucket is its own: the fans reading on the venue's network (the same
        # address) still read, and another address still scores.
        assert (await gw.get("/v1/events", headers=venue)).status_code == 200
        assert (await gw.get("/score/", headers=fan("198.51.100.21"))).status_code == 200

        # Everything else shares one more bucket per address: probes, the document, any path.
        other = fan("198.51.100.30")
        for path in ("/healthz", "/readyz", "/v1/openapi.json"):
            assert (await gw.get(path, headers=other)).status_code == 200
        refused = await gw.get("/no/such/page", headers=other)
        assert refused.status_code == 429 and "Retry-After" in refused.headers
        assert (await gw.get("/healthz", headers=other)).status_code == 429
        assert (await gw.get("/healthz", headers=fan("198.51.100.31"))).status_code == 200


async def test_metrics_are_not_served_on_the_public_port_unless_asked_and_then_limited(
    database_url: str, servers: Servers
) -> None:
    async with running_gateway(database_url, servers.redis_url) as gw:
        answer = await gw.get("/metrics")
        assert answer.status_code == 404
        assert "metrics port" in answer.json()["error"]
        assert "omnium_gateway" not in answer.text
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_public_metrics=True,
        gateway_other_rate_per_second=SLOW,
        gateway_other_burst=2,
    ) as gw:
        first = await gw.get("/metrics")
        assert first.status_code == 200 and "omnium_gateway" in first.text
        assert await statuses(gw, "/metrics", 2) == [200, 429]


async def test_live_streams_are_capped_per_client_address_or_key(
    database_url: str, servers: Servers
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    await make_event(database_url, event)
    key = "media-key-0001"
    options: dict[str, Any] = {
        "trusted_proxies": PROXY,
        "gateway_api_keys": (f"media:{key}",),
        "live_max_streams_per_client": 2,
        "live_client_retry_after_seconds": 7,
        # A quiet stream writes every second, so a stream whose fan left is noticed soon.
        "live_heartbeat_seconds": 1,
    }
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with (
        running_gateway(database_url, servers.redis_url, route_sets=[live], **options) as gw,
        aiohttp.ClientSession() as http,
    ):
        url = f"{gw.url}/v1/events/{event}/live"
        hub = live_hub(gw.app)
        streams: list[aiohttp.ClientResponse] = []

        async def open_stream(headers: dict[str, str]) -> aiohttp.ClientResponse:
            response = await http.get(url, headers=headers)
            if response.status != 200:
                await response.read()
                return response
            streams.append(response)
            # The stream is open once its first line is written.
            assert (await response.content.readline()).startswith(b"retry:")
            return response

        try:
            fan_a = fan("198.51.100.40")
            for _ in range(2):
                assert (await open_stream(fan_a)).status == 200
            refused = await open_stream(fan_a)
            assert refused.status == 429
            assert refused.headers["Retry-After"] == "7"
            assert "2 live streams" in (await refused.json())["error"]
            # Another fan, and a client with an API key (from fan A's very address), each
            # have their own count.
            assert (await open_stream(fan("198.51.100.41"))).status == 200
            keyed = {**fan_a, "X-API-Key": key}
            opened = [await open_stream(keyed) for _ in range(3)]
            assert [s.status for s in opened] == [200, 200, 429]
            # A stream's answer says the quota of the bucket it drew on, as a read's does.
            assert opened[0].headers["RateLimit-Policy"].startswith('"key";q=')
            assert opened[0].headers["RateLimit"].startswith('"key";r=')
            assert hub.count == 5

            # Fan A closes one stream: once the worker notices, it may open one again.
            streams.pop(0).close()

            async def room_again() -> bool:
                return hub.by_owner.get("ip:198.51.100.40") == 1

            await eventually(room_again, within=10, what="the closed stream to be let go")
            assert (await open_stream(fan_a)).status == 200
        finally:
            for response in streams:
                response.close()

        async def all_gone() -> bool:
            return hub.count == 0

        await eventually(all_gone, within=10, what="every stream to be let go")
        # Nobody holds a stream, so nobody is remembered.
        assert hub.by_owner == {}


async def test_a_worker_holds_at_most_one_slice_so_a_steady_trickle_starves_no_other_copy(
    database_url: str, servers: Servers
) -> None:
    """Two workers (or gateway copies) draw on one client's bucket in Redis. One sees a steady
    trickle well under the rate, a request in the last quarter of every lease: topping its
    lease up each time must not pile slice on slice until the bucket is empty, or the other
    worker, a copy that has just started, is refused at its first requests."""
    settings = gateway_settings(database_url, servers.redis_url, gateway_rate_lease_share=0.25)
    client = Client("drill", "key:drill", 10.0, 400)  # slices of 100 tokens

    def worker(redis: Any) -> RateLimiter:
        return RateLimiter(settings, redis, Cache(settings, redis, Metrics(), lambda: None))

    first = redis_client(servers.redis_url, settings, "test-first", 4)
    second = redis_client(servers.redis_url, settings, "test-second", 4)
    try:
        busy, fresh = worker(first), worker(second)
        held = []
        for _ in range(16):  # 5 a second for 3.2 s: half the rate
            assert await busy.take(client) is None
            await asyncio.sleep(0.2)
            await asyncio.gather(*busy.background())
            lease = busy.leases.peek(client.bucket)
            assert lease is not None
            held.append(lease.tokens)
        assert max(held) <= 100, held
        waits = [await fresh.take(client) for _ in range(50)]
        assert waits == [None] * 50
    finally:
        await first.aclose(close_connection_pool=True)
        await second.aclose(close_connection_pool=True)
