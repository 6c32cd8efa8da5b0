"""Pages on other origins: which answers a browser may read (CORS), and live-stream tokens."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import pytest

from omnium_gateway import LiveRoutes
from omnium_gateway._cors import StreamTokens
from omnium_settings import Settings, SettingsError
from tests.support.games import make_event
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers

FANS = "http://fans.example.test"
STRANGER = "http://elsewhere.example.test"
KEY = "media-key-0001"
SECRET = "stream-token-secret-made-at-random-0001"


def preflight(origin: str, *headers: str) -> dict[str, str]:
    asked = {"Access-Control-Request-Headers": ", ".join(headers)} if headers else {}
    return {"Origin": origin, "Access-Control-Request-Method": "GET", **asked}


async def test_without_the_setting_no_page_on_another_origin_may_read(
    database_url: str, servers: Servers
) -> None:
    async with running_gateway(database_url, servers.redis_url) as gw:
        answer = await gw.get("/v1/events", headers={"Origin": FANS})
        assert answer.status_code == 200
        assert not [h for h in answer.headers if h.lower().startswith("access-control-")]
        refused = await gw.http.options("/v1/events", headers=preflight(FANS, "x-api-key"))
        assert refused.status_code == 403
        assert "OMNIUM_GATEWAY_CORS_ORIGINS" in refused.json()["error"]
        assert "Access-Control-Allow-Origin" not in refused.headers


async def test_named_origins_may_send_a_key_and_star_opens_only_the_public_reads(
    database_url: str, servers: Servers
) -> None:
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_cors_origins=(FANS, "*"),
        gateway_api_keys=(f"media:{KEY}",),
        gateway_cors_max_age_seconds=120,
    ) as gw:
        named = await gw.get("/v1/events", headers={"Origin": FANS, "X-API-Key": KEY})
        assert named.status_code == 200
        assert named.headers["Access-Control-Allow-Origin"] == FANS
        # The answer differs by origin, and by encoding as before.
        assert named.headers["Vary"] == "Accept-Encoding, Origin"
        exposed = named.headers["Access-Control-Expose-Headers"]
        assert {"ETag", "RateLimit", "RateLimit-Policy", "Retry-After"} <= {
            h.strip() for h in exposed.split(",")
        }
        # Any other page reads what anyone may read, but never a key's answer.
        public = await gw.get("/v1/events", headers={"Origin": STRANGER})
        assert public.headers["Access-Control-Allow-Origin"] == "*"
        keyed = await gw.get("/v1/events", headers={"Origin": STRANGER, "X-API-Key": KEY})
        assert keyed.status_code == 200 and "Access-Control-Allow-Origin" not in keyed.headers
        # Errors and 404s say it too, so a page can read why.
        missing = await gw.get("/v1/events/NOPE/medals", headers={"Origin": FANS})
        assert missing.status_code == 404
        assert missing.headers["Access-Control-Allow-Origin"] == FANS

        # The preflight for a key: the named origin only.
        ok = await gw.http.options("/v1/events", headers=preflight(FANS, "x-api-key"))
        assert ok.status_code == 204
        assert ok.headers["Access-Control-Allow-Origin"] == FANS
        assert "X-API-Key" in ok.headers["Access-Control-Allow-Headers"]
        assert ok.headers["Access-Control-Allow-Methods"] == "GET, HEAD"
        assert ok.headers["Access-Control-Max-Age"] == "120"
        assert "Origin" in ok.headers["Vary"]
        assert "RateLimit" in ok.headers  # counted against the address, like any request
        no = await gw.http.options("/v1/events", headers=preflight(STRANGER, "x-api-key"))
        assert no.status_code == 403 and "operator names" in no.json()["error"]
        plain = await gw.http.options("/v1/events", headers=preflight(STRANGER))
        assert (
            plain.status_code == 204
            and "X-API-Key" not in plain.headers["Access-Control-Allow-Headers"]
        )
        token = await gw.http.options("/v1/live/tokens", headers=preflight(FANS, "x-api-key"))
        assert token.status_code == 204 and "POST" in token.headers["Access-Control-Allow-Methods"]
        # The scorer console and provider pushes are not part of the public API.
        console = await gw.get("/score/", headers={"Origin": FANS})
        assert "Access-Control-Allow-Origin" not in console.headers


def test_star_without_public_reads_and_a_path_in_an_origin_are_refused() -> None:
    with pytest.raises(SettingsError, match="ANONYMOUS_READS is false"):
        Settings.from_env({}, gateway_cors_origins=("*",), gateway_anonymous_reads=False)
    with pytest.raises(SettingsError, match="no path or trailing slash"):
        Settings.from_env({}, gateway_cors_origins=(f"{FANS}/",))


async def test_a_key_gets_a_short_lived_token_that_opens_its_live_streams_only(
    database_url: str, servers: Servers
) -> None:
    event = f"T{uuid.uuid4().hex[:8].upper()}"
    await make_event(database_url, event)
    options: dict[str, Any] = {
        "gateway_api_keys": (f"media:{KEY}",),
        "gateway_stream_token_secrets": (SECRET, "an-older-secret-still-accepted-01"),
        "gateway_stream_token_seconds": 60,
        "live_heartbeat_seconds": 1,
    }
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with (
        running_gateway(database_url, servers.redis_url, route_sets=[live], **options) as gw,
        aiohttp.ClientSession() as http,
    ):
        assert (await gw.http.post("/v1/live/tokens")).status_code == 401
        given = await gw.http.post("/v1/live/tokens", headers={"X-API-Key": KEY})
        assert given.status_code == 200 and given.headers["Cache-Control"] == "no-store"
        body = given.json()
        assert body["expires_in"] == 60 and body["expires_at"].endswith("+00:00")
        url = f"{gw.url}/v1/events/{event}/live"

        async def status(token: str) -> tuple[int, str, dict[str, str]]:
            async with http.get(url, params={"token": token}) as response:
                if response.status == 200:
                    assert (await response.content.readline()).startswith(b"retry:")
                    return 200, "", dict(response.headers)
                return response.status, (await response.json())["error"], {}

        code, _, headers = await status(body["token"])
        assert code == 200 and headers["RateLimit-Policy"].startswith('"key";')
        # Signed with the older secret: still good while it is listed.
        older = StreamTokens((b"an-older-secret-still-accepted-01",), 60).make("media")[0]
        assert (await status(older))[0] == 200
        forged = StreamTokens((b"someone-else-s-secret-000000000",), 60).make("media")[0]
        assert (await status(forged))[:2] == (401, _not_given())
        tampered = body["token"][:-2] + ("A" if body["token"][-2] != "A" else "B") + "x"
        assert (await status(tampered))[0] == 401
        expired = StreamTokens((SECRET.encode(),), 60).make("media", now=0)[0]
        assert "expired" in (await status(expired))[1]
        unknown = StreamTokens((SECRET.encode(),), 60).make("nobody")[0]
        assert "no longer allowed" in (await status(unknown))[1]
        # A token opens streams, not reads.
        read = await gw.get("/v1/events", params={"token": body["token"]})
        assert read.status_code == 401 and "live streams only" in read.json()["error"]

    async with running_gateway(
        database_url, servers.redis_url, gateway_api_keys=(f"media:{KEY}",)
    ) as gw:
        off = await gw.http.post("/v1/live/tokens", headers={"X-API-Key": KEY})
        assert off.status_code == 404
        assert "OMNIUM_GATEWAY_STREAM_TOKEN_SECRETS" in off.json()["error"]


def _not_given() -> str:
    return "This stream token is not one this API gave; ask for one with POST /v1/live/tokens."
