"""Locks: sorted, so opposite orders never deadlock; a lock held too long answers try again."""

from __future__ import annotations

import asyncio

import asyncpg

from omnium.command.v1 import command_pb2
from tests.support.command import import_batch, running_command, unit_row
from tests.support.games import make_games, make_run

OUT = command_pb2


async def test_200_pairs_locking_in_opposite_orders_never_deadlock(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=12)
    runs = [await make_run(db, games) for _ in range(200)]
    forward = games.units
    backward = list(reversed(games.units))
    batches = []
    for n, run_id in enumerate(runs):
        batches.append(
            import_batch(
                run_id,
                0,
                [
                    unit_row(i, u, key=f"k{i}", sides=[{"order": 1, "score": f"a{n}"}])
                    for i, u in enumerate(forward)
                ],
            )
        )
        batches.append(
            import_batch(
                run_id,
                1,
                [
                    unit_row(i, u, key=f"k{i}", sides=[{"order": 2, "score": f"b{n}"}])
                    for i, u in enumerate(backward)
                ],
            )
        )
    async with running_command(database_url, import_pool_size=20) as client:
        answers = await asyncio.gather(*(client.batch(b) for b in batches))
    refused = [
        (a.command_id, OUT.Outcome.Name(a.outcome), a.reason)
        for a in answers
        if a.outcome != OUT.OUTCOME_ACCEPTED
    ]
    assert refused == []
    assert await db.fetchval("SELECT count(*) FROM command") == 400
    assert await db.fetchval("SELECT sum(batch_done) FROM integration_run") == 400


async def test_a_lock_held_too_long_answers_try_again_and_writes_nothing(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    run_id = await make_run(db, games)
    batch = import_batch(
        run_id,
        0,
        [
            unit_row(0, games.units[0], status="RUNNING"),
            unit_row(1, games.units[1], status="RUNNING"),
        ],
    )
    async with running_command(database_url, import_lock_timeout_seconds=0.3) as client:
        blocker = await asyncpg.connect(database_url)
        try:
            async with blocker.transaction():
                await blocker.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", games.units[1])
                answer = await client.batch(batch)
        finally:
            await blocker.close()
        assert answer.outcome == OUT.OUTCOME_TRY_AGAIN
        assert "Send the same command again" in answer.reason
        assert await db.fetchval("SELECT count(*) FROM unit WHERE status = 'RUNNING'") == 0
        assert await db.fetchval("SELECT count(*) FROM command") == 0
        assert await db.fetchval("SELECT batch_done FROM integration_run") == 0
        again = await client.batch(batch)
    assert again.outcome == OUT.OUTCOME_ACCEPTED
    assert await db.fetchval("SELECT count(*) FROM unit WHERE status = 'RUNNING'") == 2


async def test_a_persons_command_has_a_time_limit(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_command(database_url, people_transaction_seconds=0.5) as client:
        blocker = await asyncpg.connect(database_url)
        try:
            async with blocker.transaction():
                await blocker.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", unit)
                answer = await client.submit(
                    command_id="slow",
                    code="results.set_status",
                    unit_id=unit,
                    payload={"status": "RUNNING"},
                )
        finally:
            await blocker.close()
    assert answer.outcome == OUT.OUTCOME_TRY_AGAIN
    assert await db.fetchval("SELECT status FROM unit") == "SCHEDULED"
    assert await db.fetchval("SELECT count(*) FROM command") == 0


async def test_a_write_committed_while_we_waited_is_read_before_the_diff(
    database_url: str, db: asyncpg.Connection
) -> None:
    """Lost update guard: the values compared are the ones current after our locks."""
    games = await make_games(db, units=1)
    unit = games.units[0]
    run_id = await make_run(db, games)
    async with running_command(database_url) as client:
        other = await asyncpg.connect(database_url)
        try:
            tx = other.transaction()
            await tx.start()
            # Another writer changes the unit (and bumps its changed_seq, as every writer does).
            await other.execute(
                "UPDATE unit SET status = 'RUNNING', changed_seq = nextval('change_seq') "
                "WHERE id = $1",
                unit,
            )
            # Scout still says SCHEDULED, which is what our batch would have seen before, and
            # brings a score: the batch writes this unit, so it waits for the other writer.
            row = unit_row(0, unit, status="SCHEDULED", sides=[{"order": 1, "score": "2"}])
            call = asyncio.ensure_future(client.batch(import_batch(run_id, 0, [row])))
            await asyncio.sleep(0.3)
            assert not call.done()
            await tx.commit()
            answer = await asyncio.wait_for(call, 10)
        finally:
            await other.close()
    assert answer.rows[0].outcome == command_pb2.ROW_OUTCOME_ACCEPTED
    assert sorted(answer.rows[0].changed_fields) == ["sides[1].score", "status"]
    assert await db.fetchval("SELECT status FROM unit") == "SCHEDULED"


async def test_a_row_that_changes_nothing_does_not_wait_for_another_writer(
    database_url: str, db: asyncpg.Connection
) -> None:
    """Only the records a command writes are locked. A row that changes nothing writes nothing
    to its unit, so it neither waits for nor blocks another writer: it is answered unchanged as
    of the values it read, and the key state says which (the unit's changed_seq then). Once the
    other writer commits, that changed_seq is no longer the unit's, so the next run's fast path
    does not skip the row: Scout's values are compared again."""
    games = await make_games(db, units=1)
    unit = games.units[0]
    run_id = await make_run(db, games)
    seen_seq = await db.fetchval("SELECT changed_seq FROM unit")
    async with running_command(database_url) as client:
        other = await asyncpg.connect(database_url)
        try:
            async with other.transaction():
                await other.execute(
                    "UPDATE unit SET status = 'RUNNING', changed_seq = nextval('change_seq') "
                    "WHERE id = $1",
                    unit,
                )
                row = unit_row(0, unit, status="SCHEDULED")
                answer = await asyncio.wait_for(client.batch(import_batch(run_id, 0, [row])), 10)
        finally:
            await other.close()
    assert answer.outcome == OUT.OUTCOME_ACCEPTED
    assert answer.rows[0].outcome == command_pb2.ROW_OUTCOME_UNCHANGED
    assert answer.rows[0].applied_seq == seen_seq
    assert await db.fetchval("SELECT status FROM unit") == "RUNNING"
    now = await db.fetchval("SELECT changed_seq FROM unit")
    assert await db.fetchval("SELECT applied_seq FROM integration_key_state") == seen_seq != now
