"""API keys and rate limits, kept in Redis across workers."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import http_sfv
import httpx
import pytest

from omnium_accounts import ApiKeys
from tests.support.games import EVENT, make_games
from tests.support.gateway import gateway_process, running_gateway
from tests.support.servers import Servers
from tests.support.waiting import eventually


async def test_key_over_its_limit_gets_429_and_another_key_is_unaffected(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    keys = ("ndtv:ndtv-secret-key:0.01:5", "news18:news18-secret-key:0.01:5")
    async with running_gateway(
        database_url, servers.redis_url, gateway_api_keys=keys, gateway_anonymous_reads=False
    ) as gw:
        path = f"/v1/events/{EVENT}/medals"
        ndtv = {"X-API-Key": "ndtv-secret-key"}
        for _ in range(5):
            assert (await gw.get(path, headers=ndtv)).status_code == 200
        over = await gw.get(path, headers=ndtv)
        assert over.status_code == 429
        assert int(over.headers["Retry-After"]) >= 1
        assert "ndtv" in over.json()["error"]
        other = await gw.get(path, headers={"X-API-Key": "news18-secret-key"})
        assert other.status_code == 200
        unknown = await gw.get(path, headers={"X-API-Key": "guessed-key-123"})
        assert unknown.status_code == 401 and "not known" in unknown.json()["error"]
        anonymous = await gw.get(path)
        assert anonymous.status_code == 401 and "X-API-Key" in anonymous.json()["error"]


async def test_limit_holds_across_worker_processes(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    settings = {"gateway_workers": "2", "gateway_api_keys": "media:media-secret-key:0.01:20"}
    with gateway_process(database_url, servers.redis_url, **settings) as gw:
        # A new connection per request: the kernel spreads them over both workers.
        codes = []
        for _ in range(30):
            async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
                answer = await http.get(
                    f"/v1/events/{EVENT}/medals", headers={"X-API-Key": "media-secret-key"}
                )
                codes.append(answer.status_code)
    assert codes.count(200) == 20
    assert codes.count(429) == 10


async def test_anonymous_reads_have_their_own_limit(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_anonymous_rate_per_second=0.01,
        gateway_anonymous_burst=3,
    ) as gw:
        codes = [(await gw.get("/v1/events")).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        # The probes count against a bucket of their own, not the reads'.
        assert (await gw.get("/healthz")).status_code == 200


async def test_keys_made_on_the_console_work_without_a_restart(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert pool is not None
    keys = ApiKeys(pool)
    try:
        async with running_gateway(
            database_url,
            servers.redis_url,
            gateway_api_keys=("ndtv:ndtv-secret-key",),
            gateway_anonymous_reads=False,
            gateway_keys_reload_seconds=0.2,
        ) as gw:
            path = f"/v1/events/{EVENT}/medals"
            _, key = await keys.create("dailyhunt", rate_per_second=0.01, burst=2, by="Ada")
            _, roomy = await keys.create("espn", rate_per_second=None, burst=None, by="Ada")
            # Within a reload: the new keys are let in; dailyhunt with its own small bucket.
            await eventually(lambda: _status(gw, path, key, 200), what="the new key let in")
            assert (await gw.get(path, headers={"X-API-Key": key})).status_code == 200
            over = await gw.get(path, headers={"X-API-Key": key})
            assert over.status_code == 429 and "dailyhunt" in over.json()["error"]
            for _ in range(5):  # the defaults (100 a second, 500) for a key made without limits
                assert (await gw.get(path, headers={"X-API-Key": roomy})).status_code == 200
            # Turned off: refused within a reload, the setting's key untouched.
            await keys.set_disabled("espn", True)
            await eventually(lambda: _status(gw, path, roomy, 401), what="the key turned off")
            ndtv = await gw.get(path, headers={"X-API-Key": "ndtv-secret-key"})
            assert ndtv.status_code == 200
            # A database that cannot answer leaves the keys last read in place, and the
            # worker goes on trying.
            gateway = gw.gateway
            kept = dict(gateway.database_keys)
            assert {c.name for c in kept.values()} == {"dailyhunt"}
            live_pool, broken = gateway.pool, await asyncpg.create_pool(database_url, min_size=0)
            assert broken is not None
            await broken.close()
            gateway.pool = broken
            try:
                with pytest.raises(asyncpg.InterfaceError):
                    await gateway.load_keys()
                await asyncio.sleep(0.5)  # two reloads fail
                assert gateway.database_keys == kept
                assert all(not task.done() for task in gateway.tasks)
            finally:
                gateway.pool = live_pool
        stored = await db.fetch("SELECT key_hash FROM api_key")
        assert all(key not in r["key_hash"] and roomy not in r["key_hash"] for r in stored)
    finally:
        await pool.close()


async def _status(gw: Any, path: str, key: str, status: int) -> bool:
    return bool((await gw.get(path, headers={"X-API-Key": key})).status_code == status)


async def test_a_starting_worker_knows_the_console_s_keys_before_its_first_request(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        _, key = await ApiKeys(pool).create("ndtv", rate_per_second=None, burst=None, by="Ada")
    finally:
        await pool.close()
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_anonymous_reads=False,
        gateway_keys_reload_seconds=3600.0,  # no reload in this test: only the one at start
    ) as gw:
        first = await gw.get(f"/v1/events/{EVENT}/medals", headers={"X-API-Key": key})
    assert first.status_code == 200


def quota(answer: httpx.Response) -> tuple[tuple[str, int, int], tuple[str, int, int]]:
    """(name, q, w) of RateLimit-Policy and (name, r, t) of RateLimit, each parsed as the
    Structured Field List the draft says it is (a field that is not one fails here)."""
    fields = []
    for header, first, second in (("RateLimit-Policy", "q", "w"), ("RateLimit", "r", "t")):
        parsed = http_sfv.List()
        parsed.parse(answer.headers[header].encode())
        [item] = list(parsed)
        assert isinstance(item.value, str) and set(item.params) == {first, second}
        fields.append((item.value, int(item.params[first]), int(item.params[second])))
    return fields[0], fields[1]


async def test_every_limited_answer_says_its_quota_from_the_bucket_it_drew_on(
    database_url: str, servers: Servers, db: asyncpg.Connection
) -> None:
    await make_games(db, units=1)
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_api_keys=("ndtv:ndtv-secret-key:0.01:4",),
        gateway_anonymous_rate_per_second=0.01,
        gateway_anonymous_burst=3,
        gateway_other_rate_per_second=0.5,
        gateway_other_burst=2,
    ) as gw:
        path = f"/v1/events/{EVENT}/medals"
        keyed = [await gw.get(path, headers={"X-API-Key": "ndtv-secret-key"}) for _ in range(5)]
        assert [a.status_code for a in keyed] == [200, 200, 200, 200, 429]
        # The key's bucket: 4 at once, full again 400 s after it is empty. What is left goes
        # down by one an answer (counted once: the header reads the bucket, it takes nothing).
        assert {quota(a)[0] for a in keyed} == {("key", 4, 400)}
        assert [quota(a)[1][:2] for a in keyed] == [("key", r) for r in (3, 2, 1, 0, 0)]
        assert quota(keyed[0])[1][2] == 100 and quota(keyed[3])[1][2] == 400
        assert int(keyed[4].headers["Retry-After"]) >= 1
        # A 304 is counted, and says so, too.
        etag = (await gw.get(path)).headers["ETag"]
        again = await gw.get(path, headers={"If-None-Match": etag})
        assert again.status_code == 304 and quota(again) == (("ip", 3, 300), ("ip", 1, 200))
        # Without a key: the address's bucket, its own numbers.
        anonymous = await gw.get("/v1/events")
        assert anonymous.status_code == 200 and quota(anonymous)[1][:2] == ("ip", 0)
        assert (await gw.get("/v1/events")).status_code == 429
        # A wrong key is counted against the address, and its 401 says that bucket.
        wrong = await gw.get(path, headers={"X-API-Key": "guessed-key-123"})
        assert wrong.status_code == 429 and quota(wrong)[0] == ("ip", 3, 300)
        # The probes' and unknown paths' bucket: 2 at once, a window of 4 s.
        probes = [await gw.get("/healthz"), await gw.get("/nothing-here")]
        assert [quota(a)[0] for a in probes] == [("other", 2, 4)] * 2
        assert [quota(a)[1][1] for a in probes] == [1, 0]
