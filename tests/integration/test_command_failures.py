"""Bad input gets a plain refusal; a failure mid-command leaves nothing written."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import grpc
import pytest

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from tests.support.command import import_batch, running_command, unit_row
from tests.support.games import EVENT, make_games, make_run

OUT = command_pb2
R = command_pb2.RowOutcome


async def _nothing_written(db: asyncpg.Connection) -> None:
    assert await db.fetchval("SELECT count(*) FROM command") == 0
    assert await db.fetchval("SELECT count(*) FROM timeline_item") == 0
    assert await db.fetchval("SELECT count(*) FROM domain_event") == 0
    assert await db.fetchval("SELECT count(*) FROM unit WHERE pinned <> '{}'") == 0


BAD_COMMANDS: list[tuple[str, dict[str, Any], str]] = [
    ("units.explode", {}, "is not a command omnium knows"),
    ("units.set_fields", {"fields": {"status": "PLAYING"}}, "status 'PLAYING' is not one of"),
    ("units.set_fields", {"fields": {"start_at": "tomorrow"}}, "is not a date and time"),
    ("units.set_fields", {"fields": {"start_at": "2026-09-20T10:00:00"}}, "has no time zone"),
    ("units.set_fields", {"fields": {"colour": "red"}}, "colour is not a field of a unit"),
    ("units.set_fields", {"fields": {}}, "must name at least one field"),
    ("units.set_fields", {"sides": [{"score": "1"}]}, "needs an order"),
    ("results.set_sides", {"sides": [{"order": 1, "rank": 0}]}, "rank must be 1 or more"),
    ("results.set_status", {}, "payload.status is missing"),
    ("units.unpin", {"fields": ["colour"]}, "colour is not a field of a unit"),
]


@pytest.mark.parametrize(("code", "payload", "reason"), BAD_COMMANDS)
async def test_bad_commands_are_refused_with_a_reason(
    database_url: str, db: asyncpg.Connection, code: str, payload: dict[str, Any], reason: str
) -> None:
    games = await make_games(db, units=1)
    async with running_command(database_url) as client:
        answer = await client.submit(
            command_id="bad-1", code=code, unit_id=games.units[0], payload=payload
        )
    assert answer.outcome == OUT.OUTCOME_REFUSED
    assert reason in answer.reason
    await _nothing_written(db)


async def test_unknown_subjects_are_refused(database_url: str, db: asyncpg.Connection) -> None:
    await make_games(db, units=1)
    async with running_command(database_url) as client:
        missing = await client.submit(
            command_id="m1",
            code="results.set_status",
            unit_id=str(uuid.uuid4()),
            payload={"status": "RUNNING"},
        )
        by_code = await client.submit(
            command_id="m2",
            code="results.set_status",
            code_ref="X" * 34,
            event_code=EVENT,
            payload={"status": "RUNNING"},
        )
        not_an_id = await client.submit(
            command_id="m3", code="results.set_status", unit_id="abc", payload={"status": "RUNNING"}
        )
        no_subject = await client.submit(
            command_id="m4", code="results.set_status", payload={"status": "RUNNING"}
        )
        no_id = await client.submit(
            command_id="", code="results.set_status", payload={"status": "RUNNING"}
        )
        nobody = await client.submit(
            command_id="m5",
            code="results.set_status",
            unit_id="abc",
            payload={"status": "RUNNING"},
            actor=actor_pb2.Actor(),
        )
    assert missing.outcome == OUT.OUTCOME_REFUSED and "there is no unit" in missing.reason
    assert by_code.outcome == OUT.OUTCOME_REFUSED and f"in {EVENT}" in by_code.reason
    assert not_an_id.outcome == OUT.OUTCOME_REFUSED and "is not an id" in not_an_id.reason
    assert no_subject.outcome == OUT.OUTCOME_REFUSED and "say which unit" in no_subject.reason
    assert no_id.outcome == OUT.OUTCOME_REFUSED and "command_id is empty" in no_id.reason
    assert nobody.outcome == OUT.OUTCOME_REFUSED and "says who sent it" in nobody.reason
    await _nothing_written(db)


async def test_unit_by_code_works(database_url: str, db: asyncpg.Connection) -> None:
    games = await make_games(db, units=1)
    code = games.unit_codes[games.units[0]]
    async with running_command(database_url) as client:
        answer = await client.submit(
            command_id="c",
            code="results.set_status",
            code_ref=code,
            event_code=EVENT,
            payload={"status": "RUNNING"},
        )
    assert answer.outcome == OUT.OUTCOME_ACCEPTED, answer.reason
    assert await db.fetchval("SELECT status FROM unit") == "RUNNING"


async def test_batch_over_its_size_is_refused(database_url: str, db: asyncpg.Connection) -> None:
    games = await make_games(db, units=26)
    run_id = await make_run(db, games)
    rows = [unit_row(i, unit, status="RUNNING") for i, unit in enumerate(games.units)]
    async with running_command(database_url) as client:
        answer = await client.batch(import_batch(run_id, 0, rows))
        wrong_id = import_batch(run_id, 0, rows[:2])
        wrong_id.command_id = "whatever"
        wrong = await client.batch(wrong_id)
        unknown_run = await client.batch(import_batch(str(uuid.uuid4()), 0, rows[:2]))
    assert answer.outcome == OUT.OUTCOME_REFUSED
    assert "this batch has 26 rows; at most 25" in answer.reason
    assert wrong.outcome == OUT.OUTCOME_REFUSED and "'<run_id>:<batch_no>'" in wrong.reason
    assert unknown_run.outcome == OUT.OUTCOME_REFUSED and "is not recorded" in unknown_run.reason
    await _nothing_written(db)
    assert await db.fetchval("SELECT count(*) FROM integration_key_state") == 0


async def test_batch_rows_that_cannot_be_placed_get_their_own_outcome(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    run_id = await make_run(db, games)
    stranger = str(uuid.uuid4())
    rows = [
        unit_row(0, games.units[0], status="RUNNING"),
        unit_row(1, str(uuid.uuid4()), status="RUNNING"),
        unit_row(2, games.units[1], sides=[{"order": 1, "competitor_id": stranger}]),
        unit_row(3, games.units[0], key="other-key", status="OFFICIAL"),
        command_pb2.BatchRow(
            position=4,
            key="k4",
            subject=command_pb2.Subject(id=games.units[1]),
            unit=command_pb2.UnitValues(status="FINISHED"),
        ),
    ]
    async with running_command(database_url) as client:
        answer = await client.batch(import_batch(run_id, 0, rows))
    assert answer.outcome == OUT.OUTCOME_ACCEPTED, answer.reason
    got = [(r.position, R.Name(r.outcome)) for r in answer.rows]
    assert got == [
        (0, "ROW_OUTCOME_ACCEPTED"),
        (1, "ROW_OUTCOME_NOT_PLACED"),
        (2, "ROW_OUTCOME_HELD"),
        (3, "ROW_OUTCOME_REFUSED"),
        (4, "ROW_OUTCOME_REFUSED"),
    ]
    reasons = {r.position: r.reason for r in answer.rows}
    assert "there is no unit" in reasons[1]
    assert f"names competitor {stranger}; we have no such competitor" in reasons[2]
    assert "same unit as row 0" in reasons[3]
    assert "'FINISHED' is not one of" in reasons[4]
    logged = dict(await db.fetch("SELECT position, outcome FROM integration_row"))
    assert logged == {0: "accepted", 1: "not_placed", 2: "held", 3: "refused", 4: "refused"}
    # Held and unplaced keys are seen but have no hash, so the fast path never skips them.
    hashes = dict(
        await db.fetch("SELECT subject_key, last_hash IS NOT NULL FROM integration_key_state")
    )
    assert hashes[f"key-{games.units[0]}"] is True
    assert hashes[f"key-{games.units[1]}"] is False


async def test_a_failure_mid_command_leaves_nothing(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=2)
    # The outbox insert is the last write but one: make it fail after the units were updated.
    await db.execute(
        """
        CREATE FUNCTION fail_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'disk on fire'; END $$;
        CREATE TRIGGER fail_outbox BEFORE INSERT ON domain_event
          FOR EACH ROW EXECUTE FUNCTION fail_outbox();
        """
    )
    async with running_command(database_url) as client:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.submit(
                command_id="c-9",
                code="units.set_fields",
                unit_id=games.units[0],
                payload={"fields": {"status": "RUNNING", "venue": "Elsewhere"}},
            )
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        details = caught.value.details() or ""
        assert "nothing was confirmed" in details and "incident" in details
        assert "Traceback" not in details and "disk on fire" not in details
        await _nothing_written(db)
        assert await db.fetchval("SELECT count(*) FROM unit WHERE status = 'RUNNING'") == 0
        # A retryable failure answers try again, also with nothing written.
        await db.execute(
            """
            CREATE OR REPLACE FUNCTION fail_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure'; END $$
            """
        )
        busy = await client.submit(
            command_id="c-9",
            code="units.set_fields",
            unit_id=games.units[0],
            payload={"fields": {"status": "RUNNING"}},
        )
        assert busy.outcome == OUT.OUTCOME_TRY_AGAIN
        await _nothing_written(db)
        await db.execute("DROP TRIGGER fail_outbox ON domain_event")
        answer = await client.submit(
            command_id="c-9",
            code="units.set_fields",
            unit_id=games.units[0],
            payload={"fields": {"status": "RUNNING"}},
        )
    assert answer.outcome == OUT.OUTCOME_ACCEPTED
    assert await db.fetchval("SELECT count(*) FROM unit WHERE status = 'RUNNING'") == 1


async def test_one_unit_named_by_id_and_by_code_in_one_batch(
    database_url: str, db: asyncpg.Connection
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    run_id = await make_run(db, games)
    by_code = command_pb2.BatchRow(
        position=1,
        key="by-code",
        hash=b"h" * 32,
        subject=command_pb2.Subject(kind="unit", code=games.unit_codes[unit]),
        unit=command_pb2.UnitValues(status="CANCELLED"),
    )
    async with running_command(database_url) as client:
        answer = await client.batch(
            import_batch(run_id, 0, [unit_row(0, unit, status="RUNNING"), by_code])
        )
    assert [R.Name(r.outcome) for r in answer.rows] == [
        "ROW_OUTCOME_ACCEPTED",
        "ROW_OUTCOME_REFUSED",
    ]
    assert "same unit as row 0" in answer.rows[1].reason
    assert await db.fetchval("SELECT status FROM unit") == "RUNNING"
    assert await db.fetchval("SELECT count(*) FROM domain_event") == 1
    assert (
        await db.fetchval(
            "SELECT last_hash FROM integration_key_state WHERE subject_key = 'by-code'"
        )
        is None
    )
