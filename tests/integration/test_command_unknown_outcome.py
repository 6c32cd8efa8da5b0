"""A save whose wait for the synchronous standby is cut is neither "saved" nor "nothing saved".

One private PostgreSQL whose `synchronous_standby_names` names a standby that does not exist:
every commit is written locally and then waits for a confirmation that never comes, as a
primary does whose synchronous standby has gone (before Patroni notices). The wait is cut for
real three ways: the command's own time limit (asyncpg cancels the statement), a cancel from
elsewhere (the client sees no error, only PostgreSQL's WARNING), and the backend terminated.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from omnium.command.v1 import command_pb2
from omnium.scoring.v1 import scoring_pb2
from tests.support.command import CommandClient, running_command
from tests.support.delivery import query_until
from tests.support.games import make_games
from tests.support.outage import crashable_postgres
from tests.support.scoring import assign, running_scoring
from tests.support.waiting import eventually

OUT = command_pb2
SET_STATUS = {"code": "results.set_status", "payload": {"status": "RUNNING"}}
UNKNOWN = "The outcome is unknown: "
# The command's write, committed locally, waiting for the standby.
IN_SYNC_WAIT = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE application_name LIKE 'command%' AND wait_event = 'SyncRep'"
)


async def _standby(db: asyncpg.Connection, url: str, names: str | None) -> None:
    """Name the synchronous standby (None: none), and wait until new sessions see it."""
    if names is None:
        await db.execute("ALTER SYSTEM RESET synchronous_standby_names")
    else:
        await db.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    await db.execute("SELECT pg_reload_conf()")

    async def seen() -> bool:
        conn = await asyncpg.connect(url)
        try:
            return bool(await conn.fetchval("SHOW synchronous_standby_names") == (names or ""))
        finally:
            await conn.close()

    await eventually(seen, within=30, every=0.1, what="the reload to be seen")


async def _recorded(db: asyncpg.Connection, command_id: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM command WHERE command_id = $1", command_id))


async def _send(client: CommandClient, unit: str) -> command_pb2.Answer:
    return await client.submit(command_id="c1", unit_id=unit, **SET_STATUS)


async def test_a_save_cut_by_its_time_limit_is_unknown_until_the_standby_has_it(
    tmp_path: Path,
) -> None:
    async with crashable_postgres(tmp_path) as pg:
        db = await asyncpg.connect(pg.database_url)
        try:
            unit = (await make_games(db, units=1)).units[0]
            await _standby(db, pg.database_url, "ghost")
            async with running_command(pg.database_url, people_transaction_seconds=2) as client:
                first = await _send(client, unit)
                # It is committed on this server: "nothing was saved" would be a lie.
                assert await _recorded(db, "c1") == 1
                # Found on the primary, but the standby cannot confirm it: not yet a save.
                resent = await _send(client, unit)
                await _standby(db, pg.database_url, None)
                confirmed = await _send(client, unit)
            assert await _recorded(db, "c1") == 1
        finally:
            await db.close()
    assert first.outcome == OUT.OUTCOME_TRY_AGAIN, first
    assert first.reason.startswith(UNKNOWN), first.reason
    assert "send the same command again" in first.reason.lower()
    assert resent.outcome == OUT.OUTCOME_TRY_AGAIN, resent
    assert resent.reason.startswith(UNKNOWN), resent.reason
    assert confirmed.outcome == OUT.OUTCOME_DUPLICATE, confirmed


async def test_a_save_whose_wait_is_cancelled_elsewhere_is_not_answered_saved(
    tmp_path: Path,
) -> None:
    async with crashable_postgres(tmp_path) as pg:
        db = await asyncpg.connect(pg.database_url)
        try:
            unit = (await make_games(db, units=1)).units[0]
            await _standby(db, pg.database_url, "ghost")
            async with running_command(pg.database_url, people_transaction_seconds=120) as client:
                flight = asyncio.create_task(_send(client, unit))
                pid = await query_until(db, IN_SYNC_WAIT, within=30)
                # PostgreSQL keeps the commit and tells the client with a WARNING only.
                assert await db.fetchval("SELECT pg_cancel_backend($1)", pid)
                cut = await asyncio.wait_for(flight, 60)
                await _standby(db, pg.database_url, None)
                confirmed = await _send(client, unit)
        finally:
            await db.close()
    assert cut.outcome == OUT.OUTCOME_TRY_AGAIN, cut
    assert cut.reason.startswith(UNKNOWN), cut.reason
    assert confirmed.outcome == OUT.OUTCOME_DUPLICATE, confirmed


@pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning")
async def test_a_save_whose_connection_drops_in_the_wait_is_unknown(tmp_path: Path) -> None:
    async with crashable_postgres(tmp_path) as pg:
        db = await asyncpg.connect(pg.database_url)
        try:
            unit = (await make_games(db, units=1)).units[0]
            await _standby(db, pg.database_url, "ghost")
            async with running_command(pg.database_url, people_transaction_seconds=120) as client:
                flight = asyncio.create_task(_send(client, unit))
                pid = await query_until(db, IN_SYNC_WAIT, within=30)
                assert await db.fetchval("SELECT pg_terminate_backend($1)", pid)
                dropped = await asyncio.wait_for(flight, 60)
                assert await _recorded(db, "c1") == 1
        finally:
            await db.close()
    assert dropped.outcome == OUT.OUTCOME_TRY_AGAIN, dropped
    assert dropped.reason.startswith(UNKNOWN), dropped.reason


async def test_a_tap_whose_save_is_cut_is_not_answered_saved_until_the_standby_has_it(
    tmp_path: Path,
) -> None:
    """The scorers' road: scoring finds the tap's row itself on a resend, and must not call
    it saved (DUPLICATE, which the console counts as saved) from the primary alone. The
    console keeps a tap on the device while it answers try_again (static/app.js, sync)."""
    async with crashable_postgres(tmp_path) as pg:
        db = await asyncpg.connect(pg.database_url)
        try:
            unit = (await make_games(db, units=1)).units[0]
            await assign(db, [unit])
            async with running_scoring(pg.database_url, people_transaction_seconds=2) as scoring:
                # Once scoring has started (its start-up writes wait for no standby).
                await _standby(db, pg.database_url, "ghost")
                first = await scoring.act(unit, "dev1:1", "start_period")
                saved_here = await db.fetchval("SELECT count(*) FROM match_action")
                resent = await scoring.act(unit, "dev1:1", "start_period")
                await _standby(db, pg.database_url, None)
                confirmed = await scoring.act(unit, "dev1:1", "start_period")
        finally:
            await db.close()
    assert saved_here == 1  # on the primary alone
    assert first.outcome == scoring_pb2.OUTCOME_TRY_AGAIN, first
    assert first.reason.startswith(UNKNOWN), first.reason
    assert resent.outcome == scoring_pb2.OUTCOME_TRY_AGAIN, resent
    assert resent.reason.startswith(UNKNOWN), resent.reason
    assert confirmed.outcome == scoring_pb2.OUTCOME_DUPLICATE, confirmed
