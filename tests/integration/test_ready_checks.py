"""The doorbell's and the console's /readyz, which HAProxy and Kubernetes ask: 200 while the copy
serves, 503 with a plain reason while it stops. PostgreSQL gone is every copy's trouble: the copy
stays ready and says so, so the doorbell's own 503 (reason, Retry-After) still reaches Scout.
Their liveness checks (/healthz, /health) stay 200 throughout: an unready copy is not
restarted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import httpx

from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_admin import AdminApp
from omnium_grpc import open_channel
from omnium_imports import ImportsApp
from tests.support.command import person, settings_for
from tests.support.delivery import query_until
from tests.support.games import make_games
from tests.support.imports import MEDALS, SCHEDULE, games_day, import_settings, sign
from tests.support.outage import CONNECT_RACE, CrashablePostgres, crashable_postgres
from tests.support.waiting import eventually

pytestmark = CONNECT_RACE

WITHIN = 20.0
# A statement of the copy's waiting on the test's lock.
WAITING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1"


async def _database_ok(http: httpx.AsyncClient, url: str) -> bool:
    answer = await http.get(f"{url}/readyz")
    return answer.status_code == 200 and answer.json()["database"] == "ok"


async def _not_ready(http: httpx.AsyncClient, url: str) -> bool:
    return (await http.get(f"{url}/readyz")).status_code == 503


async def _stays_ready_through_a_crash(
    pg: CrashablePostgres, url: str, alive: str, reason: str
) -> None:
    """/readyz before, during and after a crash of PostgreSQL: ready throughout, the database
    said down (with `reason`) while it is, and the liveness path `alive` answering."""
    async with httpx.AsyncClient(timeout=30) as http:
        before = await http.get(f"{url}/readyz")
        await pg.crash()
        down = await http.get(f"{url}/readyz")
        alive_when_down = await http.get(f"{url}{alive}")
        await pg.start()
        await eventually(lambda: _database_ok(http, url), within=WITHIN, what="database back")
        after = await http.get(f"{url}/readyz")
    assert before.status_code == 200 and before.json() == {"ready": True, "database": "ok"}
    assert down.status_code == 200
    assert down.json()["database"] == "down"
    assert reason in down.json()["reason"]
    assert alive_when_down.status_code == 200
    assert after.json() == {"ready": True, "database": "ok"}


async def test_the_doorbell_stays_ready_while_its_database_is_down_and_says_so(
    tmp_path: Path,
) -> None:
    async with crashable_postgres(tmp_path) as pg:
        app = ImportsApp(settings_for(pg.database_url))
        port = await app.start(0, workers=0, scheduler=False, grpc_port=0)
        try:
            await _stays_ready_through_a_crash(
                pg,
                f"http://127.0.0.1:{port}",
                "/healthz",
                "a ring is answered 503 with Retry-After",
            )
        finally:
            await app.stop(grace=1)


async def test_the_console_stays_ready_while_its_database_is_down_and_says_so(
    tmp_path: Path,
) -> None:
    async with crashable_postgres(tmp_path) as pg:
        app = AdminApp(settings_for(pg.database_url))
        port = await app.start(0)
        try:
            await _stays_ready_through_a_crash(
                pg, f"http://127.0.0.1:{port}", "/health", "PostgreSQL did not answer"
            )
        finally:
            await app.stop(grace=1)


async def test_a_stopping_doorbell_is_not_ready_and_still_queues_rings(database_url: str) -> None:
    """The copy is held stopping by a gRPC call in flight, waiting on a row the test locks."""
    async with games_day(database_url, workers=0) as day:
        # The call may wait on the lock longer than the 5 s a batch would.
        settings = import_settings(database_url, day.command.port, import_lock_timeout_seconds=30.0)
        app = ImportsApp(settings)
        port = await app.start(0, workers=1, scheduler=False, grpc_port=0)
        url = f"http://127.0.0.1:{port}"
        channel = open_channel(f"127.0.0.1:{app.grpc_port}", settings)
        blocker = await asyncpg.connect(database_url)
        await blocker.execute("BEGIN")
        # The medals integration's row: the ring below is for the schedule one.
        await blocker.execute("SELECT 1 FROM integration WHERE code = $1 FOR UPDATE", MEDALS)
        body = json.dumps({"run": {"id": "r-while-stopping"}, "sample": []}).encode()
        stopping: asyncio.Future[None] | None = None
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                before = await http.get(f"{url}/readyz")
                call = asyncio.ensure_future(
                    imports_pb2_grpc.ImportsServiceStub(channel).SetIntegrationState(
                        imports_pb2.SetIntegrationStateRequest(
                            integration_code=MEDALS, state="on", actor=person()
                        ),
                        timeout=30,
                    )
                )
                await query_until(day.db, WAITING, "UPDATE integration SET state%", within=WITHIN)
                stopping = asyncio.ensure_future(app.stop())
                await eventually(lambda: _not_ready(http, url), within=WITHIN, what="not ready")
                during = await http.get(f"{url}/readyz")
                alive = await http.get(f"{url}/healthz")
                rung = await http.post(
                    f"{url}/doorbell/{SCHEDULE}",
                    content=body,
                    headers={"X-Scout-Signature": sign(body)},
                )
                still_stopping = not stopping.done()
                await blocker.execute("ROLLBACK")
                await asyncio.wait_for(call, WITHIN)
                await asyncio.wait_for(stopping, WITHIN)
                try:
                    await http.get(f"{url}/healthz")
                    closed = False
                except httpx.ConnectError:
                    closed = True
        finally:
            await blocker.close()
            await channel.close()
            if stopping is None:
                await app.stop(grace=1)
        queued = await day.db.fetchval(
            "SELECT count(*) FROM integration_job WHERE scout_run_id = 'r-while-stopping'"
        )
    assert before.status_code == 200
    assert during.status_code == 503
    assert during.json() == {
        "ready": False,
        "stopping": True,
        "reason": "this copy is stopping; the other copies answer the doorbell",
    }
    assert alive.status_code == 200
    # A ring that still reaches the copy is queued (any copy runs it), never refused.
    assert rung.status_code == 200 and rung.json()["queued"] is True
    assert queued == 1
    assert still_stopping
    assert closed  # the doorbell closed once the copy had drained


async def test_a_stopping_console_is_not_ready_and_finishes_its_pages(
    db: asyncpg.Connection, database_url: str
) -> None:
    """The copy is held stopping by a page in flight, whose read waits on a table the test
    locks."""
    await make_games(db, units=1)
    app = AdminApp(settings_for(database_url, admin_sign_in_required=False))
    port = await app.start(0)
    url = f"http://127.0.0.1:{port}"
    blocker = await asyncpg.connect(database_url)
    await blocker.execute("BEGIN")
    await blocker.execute("LOCK TABLE unit IN ACCESS EXCLUSIVE MODE")
    stopping: asyncio.Future[None] | None = None
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            before = await http.get(f"{url}/readyz")
            page = asyncio.ensure_future(http.get(f"{url}/units"))
            await query_until(db, WAITING, "%FROM unit u JOIN discipline d%", within=WITHIN)
            stopping = asyncio.ensure_future(app.stop())
            await eventually(lambda: _not_ready(http, url), within=WITHIN, what="not ready")
            during = await http.get(f"{url}/readyz")
            alive = await http.get(f"{url}/health")
            still_stopping = not stopping.done()
            await blocker.execute("ROLLBACK")
            answered = await asyncio.wait_for(page, WITHIN)
            await asyncio.wait_for(stopping, WITHIN)
            try:
                await http.get(f"{url}/health")
                closed = False
            except httpx.ConnectError:
                closed = True
    finally:
        await blocker.close()
        if stopping is None:
            await app.stop(grace=1)
    assert before.status_code == 200
    assert during.status_code == 503
    assert during.json() == {
        "ready": False,
        "stopping": True,
        "reason": "this copy is stopping; the other copies take the console",
    }
    assert alive.status_code == 200
    assert still_stopping
    # The page in flight was answered in full, not cut by the stop.
    assert answered.status_code == 200 and "FBL" in answered.text
    assert closed
