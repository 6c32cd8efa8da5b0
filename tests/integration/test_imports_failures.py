"""When things go wrong: each ends with nothing good overwritten, nothing
saved twice, and the run on record with a plain reason."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg

from omnium.command.v1 import command_pb2
from tests.support.command import command, person
from tests.support.imports import GamesDay, games_day


async def _first_load(day: GamesDay) -> None:
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["status"] == "done"


async def test_scout_answering_500_twice_then_fine_is_done(database_url: str) -> None:
    async with games_day(database_url) as day:
        day.sim.mute_doorbell(True)
        run = await day.sim.make_run("schedule")
        day.sim.fail_next(2, path_prefix="/v1/runs/")
        await day.sim.ring(run.id)
        ours = await day.wait_for_run(run.id)
    assert ours["status"] == "done", ours["reason"]


async def test_scout_always_500_fails_with_its_reason(database_url: str) -> None:
    async with games_day(database_url) as day:
        day.sim.mute_doorbell(True)
        run = await day.sim.make_run("schedule")
        day.sim.fail_next(1000, path_prefix="/v1/")
        await day.sim.ring(run.id)
        ours = await day.wait_for_run(run.id)
        assert await day.db.fetchval("SELECT count(*) FROM unit") == 0
    assert ours["status"] == "failed"
    assert "HTTP 500" in ours["reason"] and "3 times in a row" in ours["reason"]


async def test_a_malformed_page_fails_the_run_and_writes_nothing(database_url: str) -> None:
    for kind, words in (("not_json", "is not JSON"), ("no_items", "has no 'items' list")):
        async with games_day(database_url) as day:
            day.sim.malform_next_page(kind)
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            ours = await day.wait_for_run(run.id)
            assert ours["status"] == "failed"
            assert words in ours["reason"] and "Nothing from this run was written" in ours["reason"]
            assert await day.db.fetchval("SELECT count(*) FROM unit") == 0
            assert await day.db.fetchval("SELECT count(*) FROM command") == 0
        await _reset(database_url)


async def test_a_run_claiming_more_rows_than_it_has_fails(database_url: str) -> None:
    async with games_day(database_url) as day:
        day.sim.overclaim_next_run(7)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        assert await day.db.fetchval("SELECT count(*) FROM unit") == 0
    assert ours["status"] == "failed"
    assert "rows but sent" in ours["reason"]


async def test_a_run_that_failed_scouts_checks_is_recorded(database_url: str) -> None:
    async with games_day(database_url) as day:
        run = await day.sim.make_run(
            "schedule", fail_checks="the site was down", wait_doorbell=True
        )
        ours = await day.wait_for_run(run.id)
        assert await day.db.fetchval("SELECT count(*) FROM unit") == 0
    assert ours["status"] == "scout_failed"
    assert "failed its own checks: the site was down" in ours["reason"]


async def test_an_older_run_writes_nothing(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _first_load(day)
        unit = day.sim.reference()["units"][0]["externalId"]
        day.sim.reschedule(unit, venue="Somewhere Else")
        stale = await day.sim.make_run(
            "schedule", finished_at=datetime.now(UTC) - timedelta(days=1), wait_doorbell=True
        )
        ours = await day.wait_for_run(stale.id)
        assert (
            await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Somewhere Else'") == 0
        )
    assert ours["status"] == "older"
    assert "is older than run" in ours["reason"]


async def test_pinned_fields_are_kept_and_counted(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _first_load(day)
        first = day.sim.reference()["units"][0]
        unit_id = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", first["rsc"])
        answer = await day.command.stub.Submit(
            command(
                "pin-1",
                "units.set_fields",
                {"fields": {"venue": "Toyota Stadium"}},
                unit_id=unit_id,
                actor=person(),
            ),
            timeout=10,
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED
        day.sim.reschedule(first["externalId"], venue="Nagoya Dome")
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        venue = await day.db.fetchval("SELECT venue FROM unit WHERE id = $1", unit_id)
    assert ours["status"] == "done"
    assert ours["outcomes"].get("kept_by_hand") == 1
    assert venue == "Toyota Stadium"


async def test_a_batch_that_keeps_answering_try_again_then_a_rerun(database_url: str) -> None:
    async with games_day(
        database_url,
        command_settings={"import_lock_timeout_seconds": 0.2},
        # Tried again for a second only, and no resume by itself: this test runs it again.
        import_overrides={"batch_retry_seconds": 1.0, "resume_tries": 0},
    ) as day:
        await _first_load(day)
        # Hold one unit's lock: its batch answers try again for a second, the others go on.
        code = day.sim.reference()["units"][100]["rsc"]
        for unit in day.sim.reference()["units"]:
            day.sim.reschedule(unit["externalId"], venue="Moved")
        blocker = await day.db.fetchrow("SELECT id::text FROM unit WHERE code = $1", code)
        other = await _connect(day)
        tx = other.transaction()
        await tx.start()
        await other.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", blocker["id"])
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        assert ours["status"] == "partly_done"
        assert "1 of 51 batches could not be saved" in ours["reason"]
        await day.jobs_idle()  # the alert is raised as the job closes, just after the run
        assert (
            await day.db.fetchval(
                "SELECT count(*) FROM alert WHERE kind = 'batch_failed' AND status = 'open'"
            )
            == 1
        )
        saved = await day.db.fetchval(
            "SELECT count(*) FROM command WHERE command_id LIKE $1", f"{ours['id']}:%"
        )
        assert saved == 50
        await tx.rollback()
        await other.close()
        # Run it again: the saved batches answer duplicate, the missing one goes through.
        await day.db.execute(
            "INSERT INTO integration_job (integration_id, kind, via) VALUES ($1, 'check', 'test')",
            day.schedule_id,
        )
        await day.db.execute("NOTIFY omnium_import_job")
        await day.jobs_idle()
        again = await day.wait_for_run(run.id)
        moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
        batch_alert = await day.db.fetchval("SELECT status FROM alert WHERE kind = 'batch_failed'")
        commands = await day.db.fetchval(
            "SELECT count(*) FROM command WHERE command_id LIKE $1", f"{ours['id']}:%"
        )
    assert again["status"] == "done", again["reason"]
    assert batch_alert == "cleared"
    assert moved == 1252
    assert commands == 51
    assert again["batch_done"] == 51


async def _connect(day: GamesDay):  # type: ignore[no-untyped-def]
    return await asyncpg.connect(day.database_url)


async def _reset(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "TRUNCATE integration, event, command, timeline_item, domain_event CASCADE"
        )
    finally:
        await conn.close()
    await asyncio.sleep(0)
