"""The gateway as `python -m omnium_gateway` serves it: live SSE behind keys, the scorer console."""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio as aioredis

from omnium_gateway import LiveRoutes, ScorerRoutes
from omnium_live import LivePublisher
from tests.support.games import make_event
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.sse import read_events

KEY = "media-key-0001"


async def test_live_stream_through_the_gateway_needs_a_key(
    database_url: str, servers: Servers
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    await make_event(database_url, event)
    options = {"gateway_anonymous_reads": False, "gateway_api_keys": (f"media:{KEY}",)}
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with running_gateway(database_url, servers.redis_url, route_sets=[live], **options) as gw:
        document = (await gw.get("/v1/openapi.json")).json()
        assert "/v1/events/{event}/live" in document["paths"]
        assert "/v1/events/{event}/units/{unit_code}/live" in document["paths"]

        refused = await gw.get(f"/v1/events/{event}/live")
        assert refused.status_code == 401
        assert "X-API-Key" in refused.json()["error"]
        bad = await gw.get(f"/v1/events/{event}/live", headers={"X-API-Key": "guess"})
        assert bad.status_code == 401

        redis = aioredis.from_url(servers.redis_url)
        try:
            url = f"{gw.url}/v1/events/{event}/live"
            reader = asyncio.create_task(read_events(url, 1, headers={"X-API-Key": KEY}))
            await asyncio.sleep(0.3)
            await LivePublisher(redis, max_length=10).publish(
                event, [{"kind": "unit.changed", "unit": "X", "status": "RUNNING"}]
            )
            (received,) = await reader
            assert received["data"]["status"] == "RUNNING"
        finally:
            await redis.aclose()


async def test_the_scorer_console_is_served_by_the_gateway(
    database_url: str, servers: Servers
) -> None:
    scorer = ScorerRoutes(gateway_settings(database_url, servers.redis_url))
    async with running_gateway(database_url, servers.redis_url, route_sets=[scorer]) as gw:
        page = await gw.get("/score/")
        assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
        me = await gw.get("/score/api/me")
        assert me.status_code == 401
        # The public reads are untouched by the console's routes.
        assert (await gw.get("/v1/events")).status_code == 200


async def test_a_scorer_sign_in_with_the_database_down_is_a_plain_503(
    servers: Servers, database_url: str
) -> None:
    # A port nobody listens on: PostgreSQL "down" from the first connection on.
    down = "postgresql://postgres@127.0.0.1:9/nothing"
    scorer = ScorerRoutes(gateway_settings(down, servers.redis_url))
    async with running_gateway(
        down, servers.redis_url, route_sets=[scorer], database_up=False
    ) as gw:
        answer = await gw.http.post(
            "/score/api/sign-in", json={"login": "someone", "password": "long enough pw"}
        )
        assert answer.status_code == 503
        assert "queued on this device" in answer.json()["error"]
