"""After PostgreSQL crashes and starts again, every LISTEN connection is back and catches up.

Each service runs with its polls (and its listener's probe) far longer than any wait here, so
what reaches a client in time came through a NOTIFY on the LISTEN connection made again, or
the catch-up that follows it; pg_stat_activity shows that connection, its last statement a
LISTEN.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
import redis.asyncio as aioredis
from grpc import aio

from omnium.command.v1 import command_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_db import NotifyListener, init_connection
from omnium_devstack import free_port
from omnium_imports import _queue
from omnium_live import stream_key
from tests.support.command import CommandClient, running_command, settings_for
from tests.support.delivery import filed_scores, results_client, running_delivery
from tests.support.games import EVENT, make_games
from tests.support.gateway import running_gateway
from tests.support.imports import games_day
from tests.support.outage import CONNECT_RACE, CrashablePostgres, crashable_postgres
from tests.support.scoring import assign, running_scoring
from tests.support.servers import Servers
from tests.support.sftp import asyncssh_server
from tests.support.waiting import eventually

CHANNEL = "omnium_test_channel"
# Longer than any wait below: only a NOTIFY (or the reconnect's catch-up) can wake a loop in
# time, never its poll.
LONG_POLL = 30.0
WITHIN = 10.0
# The listener probes its connection with a SELECT only this rarely, so pg_stat_activity still
# shows the LISTEN it ran last.
QUIET = {"listen_probe_seconds": LONG_POLL}
LISTENING = """
SELECT application_name FROM pg_stat_activity
 WHERE application_name LIKE '%:listen' AND query LIKE 'LISTEN %'
"""

pytestmark = CONNECT_RACE


async def notify(database_url: str, channel: str, payload: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
    finally:
        await conn.close()


async def listening(database_url: str) -> set[str]:
    """The LISTEN connections PostgreSQL has, by name (`<service>:listen`)."""
    conn = await asyncpg.connect(database_url)
    try:
        return {r["application_name"] for r in await conn.fetch(LISTENING)}
    finally:
        await conn.close()


async def listens_again(database_url: str, name: str) -> None:
    async def there() -> bool:
        return f"{name}:listen" in await listening(database_url)

    await eventually(there, within=WITHIN, what=f"{name} to LISTEN again")


class Heard:
    """What a listener's owner saw: each payload, and each call to catch up."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.catch_ups = 0

    def notified(self, payload: str) -> None:
        self.payloads.append(payload)

    def caught_up(self) -> None:
        self.catch_ups += 1


def listener_for(database_url: str, heard: Heard, name: str, **overrides: Any) -> NotifyListener:
    return NotifyListener(
        settings_for(database_url, **overrides),
        {CHANNEL: heard.notified},
        name=name,
        on_reconnect=heard.caught_up,
    )


# -- the listener itself ----------------------------------------------------------------------


def two_hosts(pg: CrashablePostgres) -> str:
    """A failover DSN whose first host is gone: asyncpg tries the next, the primary."""
    return (
        f"postgresql://postgres@127.0.0.1:{free_port()},127.0.0.1:{pg.server.port}/omnium"
        "?target_session_attrs=read-write"
    )


@pytest.mark.parametrize("hosts", ["one host", "two hosts"])
async def test_the_listener_listens_again_after_a_crash_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, hosts: str
) -> None:
    caplog.set_level(logging.INFO, logger="omnium_db")
    heard = Heard()
    async with crashable_postgres(tmp_path) as pg:
        dsn = pg.database_url if hosts == "one host" else two_hosts(pg)
        listener = listener_for(dsn, heard, "test")
        await listener.start()
        try:
            await notify(pg.database_url, CHANNEL, "before")
            await eventually(
                lambda: heard.payloads == ["before"],
                within=WITHIN,
                what="the NOTIFY before the crash",
            )
            # Down long enough for several tries to connect again.
            await pg.restart(down_seconds=1.0)
            await eventually(
                lambda: heard.catch_ups == 1, within=WITHIN, what="the listener to connect again"
            )
            assert listener.connected
            await notify(pg.database_url, CHANNEL, "after")
            await eventually(
                lambda: heard.payloads == ["before", "after"],
                within=WITHIN,
                what="the NOTIFY after",
            )
        finally:
            await listener.close()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "omnium_db._listen"]
    # One warning for the outage, not one per try, and one line when it is back.
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO], said
    assert "test: the LISTEN connection to PostgreSQL was lost" in said[0][1]
    assert "test: listening again" in said[1][1]


async def test_a_connection_that_stops_answering_is_replaced(tmp_path: Path) -> None:
    heard = Heard()
    async with crashable_postgres(tmp_path) as pg:
        listener = listener_for(
            pg.database_url,
            heard,
            "frozen",
            listen_probe_seconds=0.2,
            listen_probe_timeout_seconds=0.5,
        )
        await listener.start()
        admin = await asyncpg.connect(pg.database_url)
        frozen: int | None = None
        try:
            # A backend stopped dead keeps its socket open, as a machine that went away does:
            # nothing closes, only the probe can tell.
            frozen = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'frozen:listen'"
            )
            assert frozen is not None
            os.kill(frozen, signal.SIGSTOP)
            await eventually(
                lambda: heard.catch_ups == 1,
                within=WITHIN,
                what="the probe to give up on the connection",
            )
            await admin.execute("SELECT pg_notify($1, 'after')", CHANNEL)
            await eventually(
                lambda: heard.payloads == ["after"],
                within=WITHIN,
                what="the NOTIFY on the new connection",
            )
        finally:
            if frozen is not None:
                os.kill(frozen, signal.SIGCONT)
            await admin.close()
            await listener.close()


async def test_close_ends_the_tries_to_connect_again(tmp_path: Path) -> None:
    heard = Heard()
    async with crashable_postgres(tmp_path) as pg:
        listener = listener_for(pg.database_url, heard, "test")
        await listener.start()
        await pg.crash()
        await eventually(
            lambda: not listener.connected, within=WITHIN, what="the lost connection to be noticed"
        )
        async with asyncio.timeout(WITHIN):
            await listener.close()
        tasks = [t for t in asyncio.all_tasks() if t.get_name() == "test: LISTEN"]
        assert tasks == []
        await pg.start()
    assert heard.catch_ups == 0


# -- delivery ---------------------------------------------------------------------------------


async def score(command: CommandClient, unit_id: str, n: int, command_id: str) -> Any:
    return await command.submit(
        command_id=command_id,
        code="results.set_sides",
        payload={"sides": [{"order": 1, "score": str(n)}, {"order": 2, "score": "0"}]},
        unit_id=unit_id,
    )


async def failed_while_down(command: CommandClient, unit_id: str, n: int) -> None:
    """A write while PostgreSQL is down is not saved, and says so."""
    try:
        async with asyncio.timeout(WITHIN * 3):
            answer = await score(command, unit_id, n, f"down-{n}")
    except aio.AioRpcError as exc:
        assert exc.code() != grpc.StatusCode.OK
    else:
        assert answer.outcome != command_pb2.OUTCOME_ACCEPTED


async def pushed_ids(redis: aioredis.Redis) -> list[int]:
    entries = await redis.xrange(stream_key(EVENT)) or []
    return [json.loads(fields[b"data"])["id"] for _, fields in entries if fields]


async def saved_ids(database_url: str) -> list[int]:
    conn = await asyncpg.connect(database_url)
    try:
        return [r["id"] for r in await conn.fetch("SELECT id FROM domain_event ORDER BY id")]
    finally:
        await conn.close()


async def test_delivery_pushes_and_files_every_change_once_across_a_restart(
    tmp_path: Path, servers: Servers
) -> None:
    redis = aioredis.from_url(servers.redis_url)
    await redis.delete(stream_key(EVENT))
    files = tmp_path / "files"
    files.mkdir()
    try:
        async with crashable_postgres(tmp_path) as pg, asyncssh_server(files) as sftp:
            db = await asyncpg.connect(pg.database_url)
            await init_connection(db)
            games = await make_games(db, units=2)
            await results_client(db, sftp, "ndtv", EVENT)
            await db.close()
            codes = [games.unit_codes[unit] for unit in games.units]
            async with (
                running_command(pg.database_url) as command,
                running_delivery(
                    pg.database_url,
                    servers.redis_url,
                    delivery_poll_seconds=LONG_POLL,
                    feed_rebuild_seconds=LONG_POLL,
                    **QUIET,
                ) as delivery,
            ):
                for n in range(2):
                    answer = await score(command, games.units[n], 1, f"before-{n}")
                    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
                before = await saved_ids(pg.database_url)
                await eventually(
                    lambda: _equal(pushed_ids(redis), before), within=WITHIN, what="pushes"
                )
                await eventually(
                    lambda: filed_scores(sftp, "ndtv") == dict.fromkeys(codes, "1"),
                    within=WITHIN,
                    what="the first results file",
                )
                await pg.crash()
                await failed_while_down(command, games.units[0], 2)
                await pg.start()
                # Saved maybe before delivery listens again: the catch-up must find it.
                answer = await _retrying(
                    functools.partial(score, command, games.units[1], 2, "restarted")
                )
                assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
                listener = delivery.app.listener
                assert listener is not None
                await eventually(
                    lambda: listener.reconnects == 1, within=WITHIN, what="delivery to listen again"
                )
                assert "delivery:listen" in await listening(pg.database_url)
                for n in range(2):
                    answer = await _retrying(
                        functools.partial(score, command, games.units[n], 3, f"after-{n}")
                    )
                    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
                saved = await saved_ids(pg.database_url)
                assert len(saved) > len(before)
                # Only a NOTIFY wakes the outbox loop in time: its poll and the sweep are 30 s
                # away. The file then follows the feed's debounce.
                await eventually(
                    lambda: _equal(pushed_ids(redis), saved), within=WITHIN, what="every push"
                )
                await eventually(
                    lambda: filed_scores(sftp, "ndtv") == dict.fromkeys(codes, "3"),
                    within=WITHIN,
                    what="the results file with the changes saved after the restart",
                )
                conn = await asyncpg.connect(pg.database_url)
                try:
                    cursor = await conn.fetchval(
                        "SELECT last_id FROM delivery_cursor WHERE name = 'outbox'"
                    )
                finally:
                    await conn.close()
                assert cursor == max(saved)
        # Each saved change pushed once: none skipped, none twice; the failed write is not one.
        assert await pushed_ids(redis) == saved
    finally:
        await redis.delete(stream_key(EVENT))
        await redis.aclose()


async def _equal(got: Awaitable[list[int]], want: list[int]) -> bool:
    return await got == want


async def _retrying(write: Callable[[], Awaitable[Any]]) -> Any:
    """The first write after a restart may meet a pooled connection the crash broke: the road
    answers try_again (or the call fails) and the same command id is sent again."""
    return await eventually(
        write,
        until=lambda answer: answer.outcome != command_pb2.OUTCOME_TRY_AGAIN,
        ignoring=(aio.AioRpcError,),
        within=WITHIN * 3,
        every=0.1,
        what="the write to be answered",
    )


# -- imports ----------------------------------------------------------------------------------


async def test_imports_claims_a_job_queued_after_a_restart_at_once(tmp_path: Path) -> None:
    async with (
        crashable_postgres(tmp_path) as pg,
        games_day(
            pg.database_url, import_overrides={"imports_poll_seconds": LONG_POLL, **QUIET}
        ) as day,
    ):
        await pg.restart()
        listener = day.imports.listener
        assert listener is not None
        await eventually(
            lambda: listener.reconnects == 1, within=WITHIN, what="imports to listen again"
        )
        assert "imports:listen" in await listening(pg.database_url)
        conn = await asyncpg.connect(pg.database_url)
        try:
            job = await _queue.enqueue_check(conn, day.schedule_id, "test")
            assert job is not None

            async def claimed() -> bool:
                started = await conn.fetchval(
                    "SELECT started_at FROM integration_job WHERE id = $1", job
                )
                return started is not None

            await eventually(claimed, within=WITHIN, what="a worker to claim the job")
        finally:
            await conn.close()


# -- scoring ----------------------------------------------------------------------------------


async def test_watch_match_wakes_on_a_change_after_a_restart(tmp_path: Path) -> None:
    async with crashable_postgres(tmp_path) as pg:
        db = await asyncpg.connect(pg.database_url)
        games = await make_games(db, units=1)
        await assign(db, games.units)
        await db.close()
        unit = games.units[0]
        async with running_scoring(
            pg.database_url, scoring_watch_poll_seconds=LONG_POLL, **QUIET
        ) as scoring:
            stream = scoring.stub.WatchMatch(scoring_pb2.GetMatchStateRequest(unit_id=unit))
            first = await asyncio.wait_for(stream.read(), WITHIN)
            assert first.seq == 0
            await pg.restart()
            await listens_again(pg.database_url, "scoring watchers")
            answer = await _retrying_act(scoring, unit)
            assert answer.state.seq == 1
            # Only a NOTIFY wakes the stream in time: its poll is 30 s away.
            second = await asyncio.wait_for(stream.read(), WITHIN)
            assert second.seq == 1
            stream.cancel()


async def _retrying_act(scoring: Any, unit: str) -> scoring_pb2.ActAnswer:
    answer: scoring_pb2.ActAnswer = await eventually(
        lambda: scoring.act(unit, "d:1", "start_period"),
        until=lambda answer: answer.state.seq == 1,
        ignoring=(aio.AioRpcError,),
        within=WITHIN * 3,
        every=0.1,
        what="the action to be taken",
    )
    return answer


# -- the gateway's relay ----------------------------------------------------------------------


async def test_the_relay_invalidates_the_cache_after_a_restart(
    tmp_path: Path, servers: Servers
) -> None:
    async with crashable_postgres(tmp_path) as pg:
        db = await asyncpg.connect(pg.database_url)
        games = await make_games(db, units=1)
        await db.close()
        unit = games.units[0]
        path = f"/v1/events/{EVENT}/units/{games.unit_codes[unit]}"
        async with (
            running_command(pg.database_url) as command,
            running_gateway(
                pg.database_url,
                servers.redis_url,
                gateway_outbox_poll_seconds=LONG_POLL,
                **QUIET,
            ) as gw,
        ):
            answer = await command.submit(
                command_id="final-1",
                code="units.set_fields",
                unit_id=unit,
                payload={"fields": {"status": "OFFICIAL"}, "sides": [{"order": 1, "score": "2"}]},
            )
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason

            async def shows(score: str) -> bool:
                answer = await gw.get(path)
                return answer.status_code == 200 and answer.json()["sides"][0]["score"] == score

            await eventually(lambda: shows("2"), within=WITHIN, what="the first score")
            await pg.restart()
            await listens_again(pg.database_url, "gateway relay")
            answer = await _retrying(
                lambda: command.submit(
                    command_id="final-2",
                    code="results.set_sides",
                    unit_id=unit,
                    payload={"sides": [{"order": 1, "score": "3"}]},
                )
            )
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
            # Final results are cached for hours: only the relay's invalidation shows the new
            # score, and only a NOTIFY (or the reconnect) wakes the relay in time.
            await eventually(lambda: shows("3"), within=WITHIN, what="the new score")
            assert gw.gateway.relay is not None and gw.gateway.relay.leading
