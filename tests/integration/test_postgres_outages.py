"""PostgreSQL crashed: the doorbell and the gateway answer plainly, and catch up once it is back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import httpx
import pytest

from omnium_accounts.web import COOKIE
from omnium_db import init_connection
from omnium_gateway import ScorerRoutes
from tests.support.games import EVENT, make_games
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.imports import SCHEDULE, games_day, sign
from tests.support.outage import CONNECT_RACE, crashable_postgres
from tests.support.servers import Servers
from tests.support.waiting import eventually

pytestmark = CONNECT_RACE


def _ring_body(run_id: str) -> bytes:
    return json.dumps({"run": {"id": run_id, "status": "passed"}, "sample": []}).encode()


async def test_the_doorbell_answers_503_while_the_database_is_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with crashable_postgres(tmp_path) as pg, games_day(pg.database_url, workers=0) as day:
        url = f"{day.doorbell_url}/doorbell/{SCHEDULE}"
        body = _ring_body("r-during-outage")
        headers = {"X-Scout-Signature": sign(body), "content-type": "application/json"}
        async with httpx.AsyncClient(timeout=30) as http:
            await pg.crash()
            caplog.clear()
            down = await http.post(url, content=body, headers=headers)
            assert down.status_code == 503
            assert down.headers["Content-Type"].startswith("application/json")
            assert down.headers["Retry-After"] == "5"
            answer = down.json()
            assert answer["queued"] is False
            assert "nothing was queued" in answer["error"] and "ring again" in answer["error"]
            said = [r for r in caplog.records if r.name == "omnium_imports._doorbell"]
            assert len(said) == 1 and said[0].exc_info is None
            assert "the database did not answer" in said[0].getMessage()

            await pg.start()
            again = await eventually(
                lambda: http.post(url, content=body, headers=headers),
                until=lambda answer: answer.status_code != 503,
                within=20,
                every=0.2,
                what="the doorbell to answer once PostgreSQL is back",
            )
        assert again.status_code == 200, again.text
        assert again.json()["queued"] is True
        conn = await asyncpg.connect(pg.database_url)
        try:
            runs = await conn.fetchval(
                "SELECT count(*) FROM integration_job WHERE scout_run_id = $1", "r-during-outage"
            )
        finally:
            await conn.close()
        assert runs == 1


async def test_the_doorbell_answers_503_while_no_server_is_the_primary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mid-failover every host is up but none takes writes: the pool's connect says "no host
    is a primary" (asyncpg's TargetServerAttributeNotMatched), which is an outage too."""
    async with crashable_postgres(tmp_path) as pg:
        url_rw = f"{pg.database_url}?target_session_attrs=read-write"
        async with games_day(url_rw, workers=0) as day:
            url = f"{day.doorbell_url}/doorbell/{SCHEDULE}"
            body = _ring_body("r-no-primary")
            headers = {"X-Scout-Signature": sign(body), "content-type": "application/json"}
            # This connection was made before the change, so it still writes (to undo it).
            admin = await asyncpg.connect(pg.database_url)
            try:
                name = await admin.fetchval("SELECT current_database()")
                await admin.execute(
                    f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
                )
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = $1 AND pid <> pg_backend_pid()",
                    name,
                )
                async with httpx.AsyncClient(timeout=30) as http:
                    caplog.clear()
                    down = await http.post(url, content=body, headers=headers)
                    assert down.status_code == 503, down.text
                    assert down.json()["queued"] is False
                    said = [r for r in caplog.records if r.name == "omnium_imports._doorbell"]
                    assert len(said) == 1 and said[0].exc_info is None
                    assert "TargetServerAttributeNotMatched" in said[0].getMessage()

                    await admin.execute(
                        f'ALTER DATABASE "{name}" RESET default_transaction_read_only'
                    )
                    again = await http.post(url, content=body, headers=headers)
                assert again.status_code == 200, again.text
                assert again.json()["queued"] is True
                queued = await admin.fetchval(
                    "SELECT count(*) FROM integration_job WHERE scout_run_id = $1", "r-no-primary"
                )
            finally:
                await admin.close()
        assert queued == 1


async def test_the_gateway_with_the_database_crashed_serves_cached_and_never_500(
    tmp_path: Path, servers: Servers
) -> None:
    async with crashable_postgres(tmp_path) as pg:
        conn = await asyncpg.connect(pg.database_url)
        await init_connection(conn)
        try:
            games = await make_games(conn, units=2)
        finally:
            await conn.close()
        cached = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[0]]}"
        uncached = f"/v1/events/{EVENT}/units/{games.unit_codes[games.units[1]]}"
        options = {"cache_ttl_scheduled": 1, "cache_stale_window": 0}
        scorer = ScorerRoutes(gateway_settings(pg.database_url, servers.redis_url, **options))
        async with running_gateway(
            pg.database_url, servers.redis_url, route_sets=[scorer], **options
        ) as gw:
            first = await gw.get(cached)
            assert first.status_code == 200
            await pg.crash()
            await asyncio.sleep(1.2)  # past its time to live: only a stale copy is left
            again = await gw.get(cached)
            assert again.status_code == 200 and again.content == first.content
            missing = await gw.get(uncached)
            assert missing.status_code == 503 and "cannot answer" in missing.json()["error"]
            sign_in = await gw.http.post(
                "/score/api/sign-in", json={"login": "someone", "password": "long enough pw"}
            )
            assert sign_in.status_code == 503, sign_in.text
            assert "the database is not answering" in sign_in.json()["error"]
            me = await gw.get("/score/api/me", headers={"Cookie": f"{COOKIE}={'x' * 40}"})
            assert me.status_code == 503, me.text  # whether the session is known cannot be read
            await pg.start()
            await eventually(
                lambda: gw.get(uncached),
                until=lambda answer: answer.status_code == 200,
                within=20,
                every=0.2,
                what="a read once PostgreSQL is back",
            )
