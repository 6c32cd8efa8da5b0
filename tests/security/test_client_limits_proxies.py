"""The fan's address survives our proxies: the HA profile's HAProxy (its own configuration, in
front of two gateway copies) and Varnish (deploy/varnish/omnium.vcl) each pass X-Forwarded-For
on, and the gateway behind them gives each fan its own bucket.

The fans connect from 127.0.0.2 and 127.0.0.3; the proxies reach the gateway from 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from dev.copies import haproxy_spec, http_port, two_copies
from omnium_devstack import free_port, port_is_free
from omnium_devstack.launcher import ServiceSpec
from omnium_devstack.varnish import running_varnish
from omnium_gateway import make_app
from omnium_settings import Settings
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.waiting import eventually

SLOW = 0.01


@asynccontextmanager
async def fan_at(url: str, address: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=10) as http:
        yield http


async def statuses(http: httpx.AsyncClient, path: str, n: int, **kwargs: Any) -> list[int]:
    return [(await http.get(path, **kwargs)).status_code for _ in range(n)]


def _ha_settings() -> Settings:
    """Dev-like ports whose HAProxy frontends (port, + 1, + 2) and gateway copies (+ 100,
    + 200) are all free, as the HA profile lays them out."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(30_000, 40_000)
        if all(port_is_free(p) for p in (base, base + 1, base + 2, base + 100, base + 200)):
            return Settings.from_env(
                {}, gateway_port=base, doorbell_port=base + 1, admin_port=base + 2
            )
    raise AssertionError("no free ports for the copies")


@asynccontextmanager
async def gateway_on(port: int, settings: Settings) -> AsyncIterator[None]:
    runner = web.AppRunner(make_app(settings), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


async def test_behind_the_ha_profile_s_haproxy_each_fan_has_its_own_bucket(
    database_url: str, servers: Servers, tmp_path: Path
) -> None:
    ha = _ha_settings()
    # The copies of the gateway the HA profile starts, as it starts them.
    copies = two_copies([ServiceSpec("gateway", "omnium_gateway")], ha, tmp_path / "stack")
    trusted = {c.name: c.env.get("OMNIUM_TRUSTED_PROXIES") for c in copies}
    assert trusted["gateway-1"] == trusted["gateway-2"] == "127.0.0.0/8,::1/128"
    spec = haproxy_spec(ha, tmp_path)
    assert "option forwardfor" in (tmp_path / "haproxy.cfg").read_text()

    # Two copies sharing their buckets in Redis, on the ports HAProxy sends to.
    settings = gateway_settings(
        database_url,
        servers.redis_url,
        gateway_redis_prefix=f"test:{uuid.uuid4().hex[:10]}:",
        trusted_proxies=tuple(str(trusted["gateway-1"]).split(",")),
        gateway_anonymous_rate_per_second=SLOW,
        gateway_anonymous_burst=3,
    )
    async with contextlib.AsyncExitStack() as stack:
        for n in (1, 2):
            await stack.enter_async_context(gateway_on(http_port(ha, "gateway", n), settings))
        proxy = await asyncio.create_subprocess_exec(
            *spec.program, stdout=asyncio.subprocess.DEVNULL
        )
        try:
            front = f"http://127.0.0.1:{ha.gateway.port}"
            async with httpx.AsyncClient(base_url=front, timeout=5) as http:

                async def answers() -> bool:
                    with contextlib.suppress(httpx.HTTPError):
                        return (await http.get("/healthz")).status_code == 200
                    return False

                await eventually(answers, within=20, what="HAProxy to answer")
            async with fan_at(front, "127.0.0.2") as first, fan_at(front, "127.0.0.3") as second:
                # Round robin over both copies: one bucket per fan all the same.
                assert await statuses(first, "/v1/events", 4) == [200, 200, 200, 429]
                assert await statuses(second, "/v1/events", 3) == [200, 200, 200]
        finally:
            proxy.terminate()
            await asyncio.wait_for(proxy.wait(), 10)


async def test_behind_varnish_each_fan_has_its_own_bucket_and_cannot_pick_another(
    database_url: str, servers: Servers
) -> None:
    async with (
        running_gateway(
            database_url,
            servers.redis_url,
            trusted_proxies=("127.0.0.1/32",),
            gateway_other_rate_per_second=SLOW,
            gateway_other_burst=3,
        ) as gw,
        running_varnish(free_port(), int(gw.url.rsplit(":", 1)[1])) as varnish,
        fan_at(varnish.url, "127.0.0.2") as first,
        fan_at(varnish.url, "127.0.0.3") as second,
    ):
        # The probes pass through Varnish to the gateway, which limits them per address.
        assert await statuses(first, "/healthz", 4) == [200, 200, 200, 429]
        # Writing the header itself, the first fan is still itself: Varnish appends the
        # address it really came from, and that is the hop the gateway believes.
        forged = {"X-Forwarded-For": "198.51.100.7"}
        assert await statuses(first, "/healthz", 1, headers=forged) == [429]
        assert await statuses(second, "/healthz", 3) == [200, 200, 200]
