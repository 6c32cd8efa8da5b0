"""Compressed reads: gzip and Brotli made once per fill, chosen by Accept-Encoding, own ETags."""

from __future__ import annotations

import gzip
import json

import asyncpg
import brotli
import httpx
import redis.asyncio as aioredis

from tests.support.games import EVENT, make_games
from tests.support.gateway import running_gateway
from tests.support.servers import Servers

SCHEDULE = f"/v1/events/{EVENT}/schedule"


async def raw_get(http: httpx.AsyncClient, path: str, **headers: str) -> httpx.Response:
    """The answer with its body as sent on the wire, not decoded by httpx."""
    async with http.stream("GET", path, headers=headers) as answer:
        answer._content = b"".join([chunk async for chunk in answer.aiter_raw()])
    return answer


async def test_gzip_and_brotli_decode_to_the_plain_document(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    # Enough units that the schedule is compressed off the event loop (over 64 KB).
    await make_games(db, units=400)
    async with running_gateway(database_url, servers.redis_url) as gw:
        plain = await raw_get(gw.http, SCHEDULE, **{"Accept-Encoding": "identity"})
        gz = await raw_get(gw.http, SCHEDULE, **{"Accept-Encoding": "gzip"})
        br = await raw_get(gw.http, SCHEDULE, **{"Accept-Encoding": "gzip, br"})
        assert "Content-Encoding" not in plain.headers
        assert gz.headers["Content-Encoding"] == "gzip"
        assert br.headers["Content-Encoding"] == "br"
        document = json.loads(plain.content)
        assert len(document["units"]) == 400 and len(plain.content) > 64 * 1024
        assert json.loads(gzip.decompress(gz.content)) == document
        assert json.loads(brotli.decompress(br.content)) == document
        assert gzip.decompress(gz.content) == plain.content
        assert len(br.content) < len(plain.content) / 10
        assert len(gz.content) < len(plain.content) / 5
        for answer in (plain, gz, br):
            assert answer.headers["Vary"] == "Accept-Encoding"
            assert int(answer.headers["Content-Length"]) == len(answer.content)
        plain_tag = plain.headers["ETag"]
        assert gz.headers["ETag"] == plain_tag[:-1] + '-gz"'
        assert br.headers["ETag"] == plain_tag[:-1] + '-br"'
        # Filled once: the compressed copies sit in Redis beside the plain body.
        redis = aioredis.Redis.from_url(servers.redis_url)
        try:
            stored = await redis.get(gw.settings.gateway.redis_prefix + f"z:schedule:{EVENT}:::")
        finally:
            await redis.aclose()
        assert isinstance(stored, bytes) and stored.startswith(plain_tag.encode() + b" ")
        assert gw.gateway.metrics.db_reads() == 1


async def test_q_values_choose_the_coding(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=20)
    cases = {
        "": None,
        "br;q=0, gzip": "gzip",
        "gzip;q=1.0, br;q=0.5": "gzip",
        "gzip;q=0.5, br": "br",
        "*": "br",
        "br;q=0, *;q=0.1": "gzip",
        "identity;q=1, gzip;q=0.5": None,
        "x-gzip": "gzip",
        "compress, deflate": None,
        "gzip;q=0, br;q=0, identity;q=0": None,  # nothing acceptable: identity, not a 406
    }
    async with running_gateway(database_url, servers.redis_url) as gw:
        plain = await raw_get(gw.http, SCHEDULE, **{"Accept-Encoding": "identity"})
        for header, coding in cases.items():
            answer = await raw_get(gw.http, SCHEDULE, **{"Accept-Encoding": header})
            assert answer.status_code == 200, header
            assert answer.headers.get("Content-Encoding") == coding, header
            if coding is None:
                assert answer.content == plain.content, header


async def test_if_none_match_with_a_variant_etag_answers_304(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=20)
    async with running_gateway(database_url, servers.redis_url) as gw:
        tags = {}
        for coding in ("identity", "gzip", "br"):
            first = await raw_get(gw.http, SCHEDULE, **{"Accept-Encoding": coding})
            tags[coding] = first.headers["ETag"]
        assert len(set(tags.values())) == 3
        for coding, tag in tags.items():
            again = await raw_get(
                gw.http, SCHEDULE, **{"Accept-Encoding": coding, "If-None-Match": tag}
            )
            assert again.status_code == 304, coding
            assert again.content == b""
            assert again.headers["ETag"] == tag
            assert again.headers["Vary"] == "Accept-Encoding"
            assert "Content-Encoding" not in again.headers
        # A gzip copy's tag does not validate the Brotli copy: that client gets the body.
        other = await raw_get(
            gw.http, SCHEDULE, **{"Accept-Encoding": "br", "If-None-Match": tags["gzip"]}
        )
        assert other.status_code == 200 and other.headers["ETag"] == tags["br"]


async def test_shared_cache_headers_name_the_groups(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    code = games.unit_codes[games.units[0]]
    cases = {
        f"/v1/events/{EVENT}/units/{code}": f"unit:{EVENT}:{code}",
        f"/v1/events/{EVENT}/schedule?date=2026-09-20": f"schedule:{EVENT}",
        f"/v1/events/{EVENT}/medals?top=3": f"medals:{EVENT}",
        "/v1/events": "events",
    }
    async with running_gateway(database_url, servers.redis_url) as gw:
        for path, group in cases.items():
            answer = await gw.get(path)
            assert answer.headers["Surrogate-Key"] == group, path
            assert answer.headers["xkey"] == group, path
            control = answer.headers["Cache-Control"]
            assert control.startswith("public, max-age="), path
            max_age = control.split("max-age=")[1].split(",")[0]
            assert f"s-maxage={max_age}," in control, path
    # Reads behind API keys: a shared cache must not hand one client's copy to everyone.
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_anonymous_reads=False,
        gateway_api_keys=("site:site-key-0001",),
    ) as gw:
        path = f"/v1/events/{EVENT}/units/{code}"
        answer = await gw.get(path, headers={"X-API-Key": "site-key-0001"})
        assert answer.status_code == 200
        assert answer.headers["Cache-Control"].startswith("private, max-age=")
        assert (await gw.get(path)).headers["Cache-Control"] == "no-store"
