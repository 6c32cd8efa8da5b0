"""A command id is applied once: repeats, sequential or 20 at once, answer duplicate."""

from __future__ import annotations

import asyncio

import asyncpg

from omnium.command.v1 import command_pb2
from tests.support.command import command, import_batch, running_command, unit_row
from tests.support.games import make_games, make_run

OUT = command_pb2


async def _counts(db: asyncpg.Connection) -> tuple[int, int, int]:
    return (
        await db.fetchval("SELECT count(*) FROM command"),
        await db.fetchval("SELECT count(*) FROM timeline_item"),
        await db.fetchval("SELECT count(*) FROM domain_event"),
    )


async def test_a_repeat_answers_duplicate_and_writes_nothing(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    payload = {"fields": {"status": "RUNNING"}}
    async with running_command(database_url) as client:
        first = await client.submit(
            command_id="tap-1",
            code="results.set_status",
            unit_id=unit,
            payload={"status": "RUNNING"},
        )
        seq_after_first = await db.fetchval("SELECT changed_seq FROM unit WHERE id = $1", unit)
        again = await client.submit(
            command_id="tap-1",
            code="results.set_status",
            unit_id=unit,
            payload={"status": "RUNNING"},
        )
        other = await client.submit(
            command_id="tap-1", code="units.set_fields", unit_id=unit, payload=payload
        )
    assert first.outcome == OUT.OUTCOME_ACCEPTED
    assert again.outcome == OUT.OUTCOME_DUPLICATE
    # The repeat gets the first answer back: the same seq and the same changes.
    assert again.seq == first.seq and list(again.changes) == list(first.changes)
    assert await db.fetchval("SELECT changed_seq FROM unit WHERE id = $1", unit) == seq_after_first
    assert await _counts(db) == (1, 1, 1)
    # The same id for a different command is refused, never silently answered as the first.
    assert other.outcome == OUT.OUTCOME_REFUSED
    assert "used before for a different command" in other.reason


async def test_twenty_copies_at_once_write_exactly_once(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_command(database_url) as client:
        cmd = command(
            "burst-1", "results.set_sides", {"sides": [{"order": 1, "score": "2"}]}, unit_id=unit
        )
        answers = await asyncio.gather(*(client.stub.Submit(cmd, timeout=30) for _ in range(20)))
    outcomes = sorted(OUT.Outcome.Name(a.outcome) for a in answers)
    assert outcomes.count("OUTCOME_ACCEPTED") == 1, outcomes
    assert outcomes.count("OUTCOME_DUPLICATE") == 19, outcomes
    assert await _counts(db) == (1, 1, 1)


async def test_a_batch_sent_twice_is_applied_once(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=3)
    run_id = await make_run(db, games)
    rows = [unit_row(i, unit, status="RUNNING") for i, unit in enumerate(games.units)]
    async with running_command(database_url) as client:
        batch = import_batch(run_id, 0, rows)
        answers = await asyncio.gather(*(client.batch(batch) for _ in range(20)))
        later = await client.batch(batch)
    outcomes = [a.outcome for a in answers]
    assert outcomes.count(OUT.OUTCOME_ACCEPTED) == 1
    assert outcomes.count(OUT.OUTCOME_DUPLICATE) == 19
    assert later.outcome == OUT.OUTCOME_DUPLICATE
    assert await db.fetchval("SELECT batch_done FROM integration_run WHERE id = $1", run_id) == 1
    assert await db.fetchval("SELECT count(*) FROM domain_event") == 3
    assert await db.fetchval("SELECT count(*) FROM integration_row") == 3
