"""The database crashes and comes back (a failover, seen from the writers): nothing saved is
lost, nothing is written twice, and every sender is told plainly to send again."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from omnium.command.v1 import command_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_db import init_connection
from tests.support.command import CommandClient, running_command
from tests.support.delivery import LOCK_WAIT, query_until
from tests.support.games import make_games
from tests.support.imports import GamesDay, games_day
from tests.support.outage import CONNECT_RACE, crashable_postgres
from tests.support.scoring import ScoringClient, assign, running_console
from tests.support.waiting import eventually

OUT = command_pb2
SET_STATUS = {"code": "results.set_status", "payload": {"status": "RUNNING"}}

pytestmark = CONNECT_RACE


def _no_incidents(caplog: pytest.LogCaptureFixture) -> None:
    """An outage is expected: a WARNING line each, never an ERROR with a traceback."""
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("omnium")
    ]
    assert errors == []


async def _connect(url: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(url)
    await init_connection(conn)
    return conn


async def _send_until_answered(
    client: CommandClient, unit_id: str, seconds: float = 20.0
) -> command_pb2.Answer:
    """The same command, sent again while it answers try again (as a sender would)."""
    deadline = time.monotonic() + seconds
    while True:
        answer = await client.submit(command_id="c1", unit_id=unit_id, **SET_STATUS)
        if answer.outcome != OUT.OUTCOME_TRY_AGAIN or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.2)


async def _act_until_answered(scoring: ScoringClient, unit: str) -> scoring_pb2.ActAnswer:
    """The same action, sent again while it answers try again (as the console does)."""
    deadline = time.monotonic() + 20
    while True:
        answer = await scoring.act(unit, "dev1:1", "start_period")
        if answer.outcome != scoring_pb2.OUTCOME_TRY_AGAIN or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.2)


async def _written_once(url: str, unit_id: str) -> None:
    conn = await _connect(url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM command WHERE command_id = 'c1'") == 1
        assert (
            await conn.fetchval("SELECT count(*) FROM timeline_item WHERE command_id = 'c1'") == 1
        )
        assert await conn.fetchval("SELECT status FROM unit WHERE id = $1", unit_id) == "RUNNING"
    finally:
        await conn.close()


async def test_a_command_while_the_database_is_down_answers_try_again_then_saves_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with crashable_postgres(tmp_path) as pg:
        db = await _connect(pg.database_url)
        unit = (await make_games(db, units=1)).units[0]
        await db.close()
        async with running_command(pg.database_url) as client:
            await pg.crash()
            down = await client.submit(command_id="c1", unit_id=unit, **SET_STATUS)
            await pg.start()
            # The same process, not restarted: its pools connect again by themselves.
            back = await _send_until_answered(client, unit)
            again = await client.submit(command_id="c1", unit_id=unit, **SET_STATUS)
        await _written_once(pg.database_url, unit)
    assert down.outcome == OUT.OUTCOME_TRY_AGAIN
    assert down.reason.startswith("Nothing was saved: the database could not be reached")
    assert "Send the same command again; it is applied once." in down.reason
    assert back.outcome == OUT.OUTCOME_ACCEPTED, back.reason
    assert again.outcome == OUT.OUTCOME_DUPLICATE
    _no_incidents(caplog)


async def test_a_command_in_flight_when_the_database_crashes_is_saved_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with crashable_postgres(tmp_path) as pg:
        db = await _connect(pg.database_url)
        unit = (await make_games(db, units=1)).units[0]
        async with running_command(pg.database_url) as client:
            # Hold the unit's lock: the command waits on it, its connection open, when the
            # server goes.
            holder = db.transaction()
            await holder.start()
            await db.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", unit)
            flight = asyncio.create_task(client.submit(command_id="c1", unit_id=unit, **SET_STATUS))
            await query_until(db, LOCK_WAIT, within=10)
            await pg.crash()
            lost = await asyncio.wait_for(flight, 20)
            await pg.start()
            back = await _send_until_answered(client, unit)
        await _written_once(pg.database_url, unit)
    assert lost.outcome == OUT.OUTCOME_TRY_AGAIN
    assert "may or may not have been saved" in lost.reason
    assert "it is applied once" in lost.reason
    assert back.outcome in (OUT.OUTCOME_ACCEPTED, OUT.OUTCOME_DUPLICATE), back.reason
    _no_incidents(caplog)


async def test_scoring_during_an_outage_answers_try_again_and_the_console_keeps_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with crashable_postgres(tmp_path) as pg:
        db = await _connect(pg.database_url)
        unit = (await make_games(db, units=1)).units[0]
        await assign(db, [unit])  # the scorer that taps over gRPC below
        await db.close()
        async with running_console(pg.database_url) as site:
            await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
            await site.assign("mina", [unit])
            scoring = site.scoring
            async with httpx.AsyncClient(base_url=site.url, timeout=30) as http:
                signed = await http.post(
                    "/score/api/sign-in", json={"login": "mina", "password": "a long password"}
                )
                headers = {"X-CSRF-Token": signed.json()["csrf"]}
                await pg.crash()
                act = await scoring.act(unit, "dev1:1", "start_period")
                with pytest.raises(Exception) as read:
                    await scoring.state(unit)
                synced = await http.post(
                    "/score/api/sync",
                    json={
                        "actions": [
                            {"client_id": "dev1:2", "unit_id": unit, "kind": "start_period"}
                        ]
                    },
                    headers=headers,
                )
                await pg.start()
                again = await _act_until_answered(scoring, unit)
    assert act.outcome == scoring_pb2.OUTCOME_TRY_AGAIN
    assert "the database did not answer" in act.reason
    assert read.value.code().name == "UNAVAILABLE"  # type: ignore[attr-defined]
    assert "the database did not answer" in read.value.details()  # type: ignore[attr-defined]
    # The console (static/app.js, sync) takes an action off the device only on an answer
    # that is ok and not try_again; 503 and try_again keep it there, to be sent again.
    assert synced.status_code in (200, 503), synced.text
    if synced.status_code == 200:
        assert [a["outcome"] for a in synced.json()["answers"]] == ["try_again"]
    assert "did not answer" in synced.text or "not answering" in synced.text
    assert again.outcome == scoring_pb2.OUTCOME_SAVED, again.reason
    _no_incidents(caplog)


def _import_settings(**overrides: float) -> dict[str, float]:
    return {
        "batch_retry_first_seconds": 0.1,
        "batch_retry_max_seconds": 0.5,
        "imports_database_retry_first_seconds": 0.1,
        "imports_database_retry_max_seconds": 0.5,
        "lease_expire_seconds": 60.0,
        "database_connect_timeout_seconds": 1.0,
        **overrides,
    }


async def _first_load_then_move(day: GamesDay) -> str:
    """A first load, every unit moved at Scout, and the id of a unit to hold a lock on."""
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["status"] == "done"
    for unit in day.sim.reference()["units"]:
        day.sim.reschedule(unit["externalId"], venue="Moved")
    code = day.sim.reference()["units"][100]["rsc"]
    unit_id: str = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", code)
    return unit_id


async def _run_status(
    conn: asyncpg.Connection, scout_run_id: str, want: str, seconds: float
) -> asyncpg.Record:
    row: asyncpg.Record = await eventually(
        lambda: conn.fetchrow(
            "SELECT id::text, status, reason, batch_total, batch_done FROM integration_run "
            "WHERE scout_run_id = $1",
            scout_run_id,
        ),
        until=lambda row: row is not None and row["status"] == want,
        within=seconds,
        every=0.1,
        what=f"run {scout_run_id} to be {want}",
    )
    return row


async def _saved_once(conn: asyncpg.Connection, run_id: str, batches: int) -> None:
    """Every batch saved, each once: one command and one timeline item per batch."""
    like = f"{run_id}:%"
    assert await conn.fetchval("SELECT count(*) FROM command WHERE command_id LIKE $1", like) == (
        batches
    )
    assert (
        await conn.fetchval("SELECT count(*) FROM timeline_item WHERE command_id LIKE $1", like)
        == batches
    )
    assert await conn.fetchval("SELECT count(*) FROM unit WHERE venue <> 'Moved'") == 0


async def test_an_import_run_outlasts_a_database_outage_and_ends_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with (
        crashable_postgres(tmp_path) as pg,
        games_day(
            pg.database_url,
            command_settings={"import_lock_timeout_seconds": 0.2},
            import_overrides=_import_settings(batch_retry_seconds=90.0),
        ) as day,
    ):
        locked = await _first_load_then_move(day)
        # One batch waits on a lock, so the run is under way when the server goes.
        holder = await _connect(pg.database_url)
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", locked)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        await eventually(
            lambda: holder.fetchval(
                "SELECT count(*) FROM command c JOIN integration_run r "
                "ON c.command_id LIKE r.id::text || ':%' WHERE r.scout_run_id = $1",
                run.id,
            ),
            within=30,
            what="a batch of the run saved",
        )
        await pg.crash()  # the lock goes with it
        await asyncio.sleep(3)
        await pg.start()
        day.db = await _connect(pg.database_url)
        ours = await _run_status(day.db, run.id, "done", 60)
        await _saved_once(day.db, ours["id"], ours["batch_total"])
        assert ours["batch_done"] == ours["batch_total"]
    _no_incidents(caplog)


async def test_a_partly_done_run_resumes_by_itself(database_url: str) -> None:
    async with games_day(
        database_url,
        command_settings={"import_lock_timeout_seconds": 0.2},
        import_overrides=_import_settings(
            batch_retry_seconds=0.5,
            resume_first_seconds=0.5,
            resume_max_seconds=1.0,
            resume_tries=3,
        ),
    ) as day:
        locked = await _first_load_then_move(day)
        holder = await _connect(database_url)
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", locked)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        partly = await _run_status(day.db, run.id, "partly_done", 30)
        await tx.rollback()
        await holder.close()
        # Nobody starts it again: it resumes by itself, and its saved batches answer duplicate.
        done = await _run_status(day.db, run.id, "done", 30)
        await _saved_once(day.db, done["id"], done["batch_total"])
        resumes = await day.db.fetchval(
            "SELECT count(*) FROM integration_job WHERE run_id = $1::uuid AND via = 'resume'",
            done["id"],
        )
    assert "could not be saved" in partly["reason"]
    assert resumes >= 1
