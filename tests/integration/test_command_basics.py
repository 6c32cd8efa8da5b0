"""The command service end to end: Submit and ApplyImportBatch over real gRPC and PostgreSQL."""

from __future__ import annotations

import asyncpg

from omnium.command.v1 import command_pb2
from tests.support.command import import_batch, running_command, unit_row
from tests.support.games import make_games, make_run

ACCEPTED = command_pb2.OUTCOME_ACCEPTED


async def test_person_sets_a_field_and_pins_it(database_url: str, db: asyncpg.Connection) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    async with running_command(database_url) as client:
        answer = await client.submit(
            command_id="c-1",
            code="units.set_fields",
            unit_id=unit,
            payload={"fields": {"venue": "Toyota Stadium", "status": "DELAYED"}},
        )
    assert answer.outcome == ACCEPTED, answer.reason
    assert {c.field for c in answer.changes} == {"venue", "status"}
    row = await db.fetchrow(
        "SELECT venue, status, pinned, changed_seq FROM unit WHERE id = $1", unit
    )
    assert row["venue"] == "Toyota Stadium"
    assert row["status"] == "DELAYED"
    assert sorted(row["pinned"]) == ["status", "venue"]
    assert row["changed_seq"] == answer.seq


async def test_batch_writes_changes_and_key_state(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=3)
    run_id = await make_run(db, games)
    rows = [
        unit_row(0, games.units[0], status="RUNNING", sides=[{"order": 1, "score": "1"}]),
        unit_row(1, games.units[1], venue="Nagoya Stadium"),  # the same as ours: unchanged
    ]
    async with running_command(database_url) as client:
        answer = await client.batch(import_batch(run_id, 0, rows))
    assert answer.outcome == ACCEPTED, answer.reason
    outcomes = [command_pb2.RowOutcome.Name(r.outcome) for r in answer.rows]
    assert outcomes == ["ROW_OUTCOME_ACCEPTED", "ROW_OUTCOME_UNCHANGED"]
    assert answer.batch_done == 1
    states = {
        r["subject_key"]: r
        for r in await db.fetch("SELECT * FROM integration_key_state ORDER BY subject_key")
    }
    seqs = dict(await db.fetch("SELECT id::text, changed_seq FROM unit"))
    for row, unit in zip(answer.rows, games.units[:2], strict=True):
        state = states[f"key-{unit}"]
        assert state["applied_seq"] == seqs[unit] == row.applied_seq
        assert state["last_seen_run"] is not None and str(state["last_seen_run"]) == run_id
        assert state["missing_runs"] == 0
        assert state["last_hash"] is not None
    assert await db.fetchval("SELECT batch_done FROM integration_run WHERE id = $1", run_id) == 1
    assert (
        await db.fetchval(
            "SELECT score FROM unit_competitor WHERE unit_id = $1 AND sort_order = 1",
            games.units[0],
        )
        == "1"
    )


async def test_each_road_has_its_own_limits_and_commits_durably(database_url: str) -> None:
    async with running_command(database_url) as client:
        people, imports, _reader = client.app.pools
        async with people.acquire() as conn:
            assert await conn.fetchval("SHOW synchronous_commit") == "on"
            assert await conn.fetchval("SHOW statement_timeout") == "10s"
        async with imports.acquire() as conn:
            assert await conn.fetchval("SHOW synchronous_commit") == "on"
            assert await conn.fetchval("SHOW lock_timeout") == "5s"
            assert await conn.fetchval("SHOW statement_timeout") == "30s"
            assert await conn.fetchval("SHOW idle_in_transaction_session_timeout") == "30s"


async def test_a_schedule_batch_creates_the_units_it_names(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    run_id = await make_run(db, games)
    new_code = "FBLMEVENT-------------FNL-00000099"
    rows = [
        command_pb2.BatchRow(
            position=0,
            key="SC-99",
            hash=b"a" * 32,
            subject=command_pb2.Subject(kind="unit", code=new_code),
            unit=command_pb2.UnitValues(
                name="Final",
                discipline_code="FBL",
                status="SCHEDULED",
                start_at="2026-10-04T19:00:00+09:00",
                venue="Toyota Stadium",
                sides=[
                    command_pb2.SideValues(order=1, competitor_id=games.competitors["KOR"]),
                    command_pb2.SideValues(order=2, competitor_id=games.competitors["JPN"]),
                ],
            ),
        ),
        command_pb2.BatchRow(
            position=1,
            key="SC-98",
            hash=b"b" * 32,
            subject=command_pb2.Subject(kind="unit", code="FBLMEVENT-------------FNL-00000098"),
            unit=command_pb2.UnitValues(name="Semi", discipline_code="XXX"),
        ),
    ]
    async with running_command(database_url) as client:
        answer = await client.batch(_with_create(import_batch(run_id, 0, rows)))
        again = await client.batch(import_batch(run_id, 1, rows[:1]))
    created, bad = answer.rows
    assert created.outcome == command_pb2.ROW_OUTCOME_ACCEPTED, created.reason
    assert bad.outcome == command_pb2.ROW_OUTCOME_NOT_PLACED
    assert "no discipline 'XXX'" in bad.reason
    unit = await db.fetchrow(
        "SELECT id::text, name, venue, changed_seq FROM unit WHERE code = $1", new_code
    )
    assert unit["id"] == created.subject_id and unit["name"] == "Final"
    assert unit["changed_seq"] == created.applied_seq
    assert (
        await db.fetchval("SELECT count(*) FROM unit_competitor WHERE unit_id = $1", unit["id"])
        == 2
    )
    assert await db.fetchval("SELECT kind FROM domain_event") == "unit.created"
    # Without create_units the same kind of row is only placed on a unit we have.
    assert again.rows[0].outcome == command_pb2.ROW_OUTCOME_UNCHANGED


def _with_create(batch: command_pb2.ImportBatch) -> command_pb2.ImportBatch:
    batch.create_units = True
    return batch
