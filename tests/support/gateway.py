"""Start the real gateway: in this process on an ephemeral port, or as its own worker processes."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from aiohttp import web

from omnium_devstack.stack import dev_process_environ
from omnium_gateway import GATEWAY, Gateway, RouteSet, make_app
from omnium_settings import Settings
from tests.support.waiting import eventually


def gateway_settings(database_url: str, redis_url: str, **overrides: Any) -> Settings:
    """A unique Redis prefix per gateway set, so tests sharing one Redis never see each other."""
    overrides.setdefault("gateway_redis_prefix", f"test:{uuid.uuid4().hex[:10]}:")
    overrides.setdefault("environment", "development")
    return Settings.from_env({}, database_url=database_url, redis_url=redis_url, **overrides)


@dataclass(slots=True)
class RunningGateway:
    url: str
    http: httpx.AsyncClient
    gateway: Gateway
    settings: Settings
    app: web.Application

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.http.get(path, **kwargs)


@asynccontextmanager
async def running_gateway(
    database_url: str,
    redis_url: str,
    route_sets: Sequence[RouteSet] = (),
    *,
    database_up: bool = True,
    **overrides: Any,
) -> AsyncIterator[RunningGateway]:
    """`database_up=False` for a gateway started with PostgreSQL down: its relay then holds
    the lease but cannot read the outbox head, so only the lease is waited for."""
    settings = gateway_settings(database_url, redis_url, **overrides)
    app = make_app(settings, route_sets=route_sets)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}"
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
            gateway = app[GATEWAY]
            await wait_until_relay(gateway, reading=database_up)
            yield RunningGateway(url, http, gateway, settings, app)
    finally:
        await runner.cleanup()


async def wait_until_relay(gateway: Gateway, *, reading: bool = True) -> None:
    """Invalidations flow once this worker listens and the relay has read the outbox head (a
    change saved before that is not relayed: the relay starts from the head). With `reading`
    off, until the relay holds its lease (it cannot read a database that is down)."""

    def relaying() -> bool:
        relay = gateway.relay
        if relay is None:
            return False
        return relay.watermark is not None if reading else relay.leading

    await eventually(
        lambda: gateway.cache.listening and relaying(),
        within=10,
        every=0.02,
        what="the worker listening and the relay " + ("reading" if reading else "leading"),
    )


@dataclass(slots=True)
class GatewayProcess:
    url: str
    process: subprocess.Popen[str]


def gateway_env(database_url: str, redis_url: str, **settings: str) -> dict[str, str]:
    env = dev_process_environ()
    env.update(
        OMNIUM_DATABASE_URL=database_url,
        OMNIUM_REDIS_URL=redis_url,
        OMNIUM_GATEWAY_PORT="0",
        OMNIUM_GATEWAY_METRICS_PORT="0",
        OMNIUM_GATEWAY_REDIS_PREFIX=f"test:{uuid.uuid4().hex[:10]}:",
        OMNIUM_LOG_LEVEL="WARNING",
        # A dev process, as gateway_settings makes one: production refuses the dev defaults.
        OMNIUM_ENVIRONMENT="development",
    )
    env.update({f"OMNIUM_{k.upper()}": v for k, v in settings.items()})
    return env


@contextlib.contextmanager
def gateway_process(database_url: str, redis_url: str, **settings: str) -> Iterator[GatewayProcess]:
    """`python -m omnium_gateway` with its worker processes, on a port the kernel picks."""
    process = subprocess.Popen(
        [sys.executable, "-m", "omnium_gateway"],
        env=gateway_env(database_url, redis_url, **settings),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"http://[\d.]+:\d+", line)
        if found is None:
            raise RuntimeError(f"the gateway did not start: {line!r}")
        yield GatewayProcess(found[0], process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
