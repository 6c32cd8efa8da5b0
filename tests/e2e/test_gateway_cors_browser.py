"""A fan site on another origin, in Chromium: it reads the API with its key (fetch) and follows
a live stream with a token (EventSource, which cannot send a header); a page on an origin the
operator did not name is stopped by the browser itself."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from playwright.async_api import async_playwright

from omnium_gateway import LiveRoutes
from omnium_live import LivePublisher, stream_key
from tests.support.games import make_event
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers

pytestmark = pytest.mark.e2e

KEY = "fan-site-key-0001"
PAGE = "<!doctype html><title>fan site</title><p>results from another origin</p>"

# What the fan site's own script does: read with its key, then ask for a token and open the
# stream with it. Each step's outcome is kept on `window` for the test to read.
READ = """async ([api, path, key]) => {
  try {
    const answer = await fetch(api + path, {headers: {"X-API-Key": key}});
    return {status: answer.status, quota: answer.headers.get("RateLimit"),
            events: (await answer.json()).events?.length ?? null};
  } catch (error) {
    return {blocked: String(error)};
  }
}"""
FOLLOW = """async ([api, path, key]) => {
  const given = await fetch(api + "/v1/live/tokens", {method: "POST", headers: {"X-API-Key": key}});
  const {token} = await given.json();
  window.received = [];
  const stream = new EventSource(api + path + "?token=" + encodeURIComponent(token));
  stream.addEventListener("unit.changed", (e) => window.received.push(JSON.parse(e.data)));
  await new Promise((resolve, reject) => {
    stream.onopen = resolve;
    stream.onerror = () => reject(new Error("the stream did not open"));
  });
  return given.status;
}"""


@asynccontextmanager
async def fan_site() -> AsyncIterator[int]:
    """A page server on a port of its own: another origin than the gateway's."""

    async def page(request: web.Request) -> web.Response:
        del request
        return web.Response(text=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_a_fan_site_reads_with_its_key_and_follows_a_stream_with_a_token(
    database_url: str, servers: Servers
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    await make_event(database_url, event)
    async with fan_site() as port:
        allowed, other = f"http://127.0.0.1:{port}", f"http://localhost:{port}"
        options: dict[str, Any] = {
            "gateway_cors_origins": (allowed,),
            "gateway_api_keys": (f"fansite:{KEY}",),
            "gateway_stream_token_secrets": ("stream-token-secret-made-at-random-0002",),
            "live_heartbeat_seconds": 1,
        }
        live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
        async with (
            running_gateway(database_url, servers.redis_url, route_sets=[live], **options) as gw,
            async_playwright() as playwright,
        ):
            browser = await playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
            )
            redis = aioredis.Redis.from_url(servers.redis_url)
            try:
                page = await browser.new_page()
                await page.goto(f"{allowed}/")
                read = await page.evaluate(READ, [gw.url, "/v1/events", KEY])
                assert read["status"] == 200 and read["events"] >= 1
                # The page may read the quota too: the header is exposed to it.
                assert read["quota"].startswith('"key";r=')

                live_path = f"/v1/events/{event}/live"
                assert await page.evaluate(FOLLOW, [gw.url, live_path, KEY]) == 200
                await LivePublisher(redis, max_length=100).publish(
                    event, [{"kind": "unit.changed", "unit": "U1", "n": 1}]
                )
                await page.wait_for_function("window.received.length === 1", timeout=10_000)
                assert await page.evaluate("window.received[0].n") == 1

                # The same page served from an origin the operator did not name: the browser
                # refuses the key's read (its preflight is refused), and so the stream's token.
                stranger = await browser.new_page()
                await stranger.goto(f"{other}/")
                refused = await stranger.evaluate(READ, [gw.url, "/v1/events", KEY])
                assert "blocked" in refused and "Failed to fetch" in refused["blocked"]
                with pytest.raises(Exception, match="Failed to fetch"):
                    await stranger.evaluate(FOLLOW, [gw.url, live_path, KEY])
            finally:
                await redis.delete(stream_key(event))
                await redis.aclose()
                await browser.close()
