"""An imports or delivery copy told to stop lets a gRPC call in flight finish (it gets
OMNIUM_GRPC_GRACE_SECONDS, 10 s), while its own work goes to the other copies at once.

Each call waits on a row lock the test holds, let go only once the copy has been stopping for a
while: for delivery, once its clients are handed over, so a copy that drained its calls before
handing over (or cut them) fails the test."""

from __future__ import annotations

import asyncio
import base64

import asyncpg
from grpc_health.v1 import health_pb2

from omnium.delivery.v1 import delivery_pb2, delivery_pb2_grpc
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_delivery import DeliveryApp, load_clients
from omnium_grpc import open_channel
from omnium_imports import ImportsApp
from tests.support.command import person, settings_for
from tests.support.delivery import query_until
from tests.support.games import EVENT, make_games
from tests.support.imports import SCHEDULE, games_day, import_settings
from tests.support.waiting import eventually

WITHIN = 10.0
# The call's own statement waiting on the test's lock (not some other loop of the copy).
WAITING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1"


async def _not_serving(app: ImportsApp) -> bool:
    assert app.grpc is not None
    answer = await app.grpc.health.Check(health_pb2.HealthCheckRequest(), None)
    return bool(answer.status == health_pb2.HealthCheckResponse.NOT_SERVING)


async def _locked(database_url: str, query: str, *args: object) -> asyncpg.Connection:
    """A connection holding `query`'s row locks in an open transaction."""
    blocker = await asyncpg.connect(database_url)
    await blocker.execute("BEGIN")
    await blocker.execute(query, *args)
    return blocker


async def test_a_stopping_imports_copy_finishes_the_call_in_flight(database_url: str) -> None:
    async with games_day(database_url, workers=0) as day:
        # The call may wait on the lock longer than the 5 s a batch would.
        settings = import_settings(database_url, day.command.port, import_lock_timeout_seconds=30.0)
        app = ImportsApp(settings)
        await app.start(0, workers=1, scheduler=False, grpc_port=0)
        channel = open_channel(f"127.0.0.1:{app.grpc_port}", settings)
        blocker = await _locked(
            database_url, "SELECT 1 FROM integration WHERE code = $1 FOR UPDATE", SCHEDULE
        )
        stopping: asyncio.Future[None] | None = None
        try:
            call = asyncio.ensure_future(
                imports_pb2_grpc.ImportsServiceStub(channel).SetIntegrationState(
                    imports_pb2.SetIntegrationStateRequest(
                        integration_code=SCHEDULE, state="paused", actor=person()
                    ),
                    timeout=30,
                )
            )
            await query_until(day.db, WAITING, "UPDATE integration SET state%", within=WITHIN)
            stopping = asyncio.ensure_future(app.stop())
            await eventually(lambda: _not_serving(app), within=WITHIN, what="NOT_SERVING")
            # Held past a second: a copy that gave its calls only that long would cut this one.
            await asyncio.sleep(2.0)
            still_stopping = not stopping.done()
            await blocker.execute("ROLLBACK")
            answer = await asyncio.wait_for(call, WITHIN)
            await asyncio.wait_for(stopping, WITHIN)
        finally:
            await blocker.close()
            await channel.close()
            if stopping is None:
                await app.stop(grace=1)
        state = await day.db.fetchval("SELECT state FROM integration WHERE code = $1", SCHEDULE)
    assert still_stopping
    assert answer.done, answer.message
    assert state == "paused"


async def test_a_stopping_delivery_copy_finishes_the_call_in_flight(
    db: asyncpg.Connection, database_url: str
) -> None:
    await make_games(db, units=1)
    # Off: no copy sends to it, so only the Resend call touches its feed.
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
    await load_clients(
        db,
        [
            {
                "code": "news18",
                "name": "News18",
                "event": EVENT,
                "enabled": False,
                "transport": "webhook",
                "webhook": {"url": "http://127.0.0.1:9/hook", "secret": secret},
                "feeds": [{"kind": "medals", "format": "json", "top": 5}],
            }
        ],
    )
    settings = settings_for(database_url)
    app = DeliveryApp(settings)
    port = await app.start(0)
    channel = open_channel(f"127.0.0.1:{port}", settings)
    # The hand-over wakes the other copies' senders: heard here, it shows the hand-over done.
    woken = asyncio.Event()
    await db.add_listener("omnium_delivery_feed", lambda *_: woken.set())
    blocker = await _locked(database_url, "SELECT 1 FROM client_feed FOR UPDATE")
    stopping: asyncio.Future[None] | None = None
    try:
        call = asyncio.ensure_future(
            delivery_pb2_grpc.DeliveryServiceStub(channel).Resend(
                delivery_pb2.ResendRequest(client_code="news18"), timeout=30
            )
        )
        await query_until(db, WAITING, "UPDATE client_feed f SET force%", within=WITHIN)
        stopping = asyncio.ensure_future(app.stop())
        await asyncio.wait_for(woken.wait(), WITHIN)
        still_stopping = not stopping.done()
        await blocker.execute("ROLLBACK")
        answer = await asyncio.wait_for(call, WITHIN)
        await asyncio.wait_for(stopping, WITHIN)
    finally:
        await blocker.close()
        await channel.close()
        if stopping is None:
            await app.stop(grace=1)
    forced = await db.fetchval("SELECT bool_and(force) FROM client_feed")
    assert still_stopping
    assert answer.feeds == 1
    assert forced
