"""A person's edit pins the fields it set; imports keep their hands off until it is unpinned."""

from __future__ import annotations

import asyncpg

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from tests.support.command import import_batch, running_command, unit_row
from tests.support.games import make_games, make_run

OUT = command_pb2
R = command_pb2.RowOutcome


async def test_import_keeps_pinned_fields_and_writes_the_rest(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    async with running_command(database_url) as client:
        edit = await client.submit(
            command_id="edit-1",
            code="units.set_fields",
            unit_id=unit,
            payload={"fields": {"venue": "Toyota Stadium"}, "sides": [{"order": 1, "result": "W"}]},
        )
        assert edit.outcome == OUT.OUTCOME_ACCEPTED, edit.reason
        run_id = await make_run(db, games)
        answer = await client.batch(
            import_batch(
                run_id,
                0,
                [
                    unit_row(
                        0,
                        unit,
                        venue="Nagoya Dome",
                        status="RUNNING",
                        sides=[{"order": 1, "result": "L", "score": "0"}],
                    ),
                    unit_row(1, games.units[1], venue="Nagoya Dome"),
                ],
            )
        )
    assert answer.outcome == OUT.OUTCOME_ACCEPTED, answer.reason
    first, second = answer.rows
    assert first.outcome == R.ROW_OUTCOME_ACCEPTED
    assert sorted(first.changed_fields) == ["sides[1].score", "status"]
    assert sorted(first.kept_by_hand) == ["sides[1].result", "venue"]
    assert second.outcome == R.ROW_OUTCOME_ACCEPTED
    unit_now = await db.fetchrow("SELECT venue, status FROM unit WHERE id = $1", unit)
    assert dict(unit_now) == {"venue": "Toyota Stadium", "status": "RUNNING"}
    side = await db.fetchrow(
        "SELECT result, score FROM unit_competitor WHERE unit_id = $1 AND sort_order = 1", unit
    )
    assert dict(side) == {"result": "W", "score": "0"}
    logged = await db.fetchrow(
        "SELECT outcome, kept_by_hand FROM integration_row WHERE position = 0"
    )
    assert logged["outcome"] == "accepted"
    assert {k["field"] for k in logged["kept_by_hand"]} == {"venue", "sides[1].result"}


async def test_only_pinned_differences_is_kept_by_hand(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_command(database_url) as client:
        await client.submit(
            command_id="e", code="results.set_status", unit_id=unit, payload={"status": "POSTPONED"}
        )
        run_id = await make_run(db, games)
        answer = await client.batch(import_batch(run_id, 0, [unit_row(0, unit, status="RUNNING")]))
    assert answer.rows[0].outcome == R.ROW_OUTCOME_KEPT_BY_HAND
    assert await db.fetchval("SELECT status FROM unit WHERE id = $1", unit) == "POSTPONED"
    # Nothing changed, so no outbox row beyond the person's own edit.
    assert await db.fetchval("SELECT count(*) FROM domain_event") == 1


async def test_unpin_lets_the_next_import_write(database_url: str, db: asyncpg.Connection) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_command(database_url) as client:
        await client.submit(
            command_id="e1",
            code="results.set_status",
            unit_id=unit,
            payload={"status": "POSTPONED"},
        )
        unpin = await client.submit(
            command_id="e2", code="units.unpin", unit_id=unit, payload={"fields": ["status"]}
        )
        assert unpin.outcome == OUT.OUTCOME_ACCEPTED, unpin.reason
        assert await db.fetchval("SELECT pinned FROM unit WHERE id = $1", unit) == []
        run_id = await make_run(db, games)
        answer = await client.batch(import_batch(run_id, 0, [unit_row(0, unit, status="RUNNING")]))
    assert answer.rows[0].outcome == R.ROW_OUTCOME_ACCEPTED
    assert await db.fetchval("SELECT status FROM unit WHERE id = $1", unit) == "RUNNING"


async def test_an_integration_command_respects_pins(
    database_url: str, db: asyncpg.Connection
) -> None:
    """results.set_status from an integration (auto-cancel) never overrides a person."""
    games = await make_games(db, units=1)
    unit = games.units[0]
    robot = actor_pb2.Actor(
        kind=actor_pb2.Actor.KIND_INTEGRATION, name="integration:scout-fbl", source_code="scout-fbl"
    )
    async with running_command(database_url) as client:
        await client.submit(
            command_id="p", code="results.set_status", unit_id=unit, payload={"status": "RUNNING"}
        )
        answer = await client.submit(
            command_id="i",
            code="results.set_status",
            unit_id=unit,
            payload={"status": "CANCELLED"},
            actor=robot,
        )
    assert answer.outcome == OUT.OUTCOME_ACCEPTED
    assert [k.field for k in answer.kept_by_hand] == ["status"]
    assert not answer.changes
    assert await db.fetchval("SELECT status FROM unit WHERE id = $1", unit) == "RUNNING"


async def test_an_empty_diff_writes_no_record(database_url: str, db: asyncpg.Connection) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    before = await db.fetchval("SELECT changed_seq FROM unit WHERE id = $1", unit)
    run_id = await make_run(db, games)
    async with running_command(database_url) as client:
        answer = await client.batch(
            import_batch(
                run_id,
                0,
                [
                    unit_row(
                        0,
                        unit,
                        venue="Nagoya Stadium",
                        status="SCHEDULED",
                        sides=[{"order": 1, "competitor_id": games.competitors["KOR"]}],
                    ),
                ],
            )
        )
    assert answer.rows[0].outcome == R.ROW_OUTCOME_UNCHANGED
    assert answer.rows[0].applied_seq == before
    assert answer.seq == 0
    assert await db.fetchval("SELECT changed_seq FROM unit WHERE id = $1", unit) == before
    assert await db.fetchval("SELECT count(*) FROM domain_event") == 0
    assert await db.fetchval("SELECT count(*) FROM integration_row") == 0
