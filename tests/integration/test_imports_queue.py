"""The queue: the scheduler's checks, and several imports processes sharing the work."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from omnium_imports import ImportsApp
from tests.support.imports import games_day, import_settings
from tests.support.waiting import eventually


async def test_the_scheduler_checks_a_quiet_integration_and_sees_scout_failing(
    database_url: str,
) -> None:
    async with games_day(database_url) as day:
        day.sim.mute_doorbell(True)
        failed = await day.sim.make_run("schedule", fail_checks="the results page timed out")
        # Quiet for longer than its check interval: the scheduler queues a check.
        await day.db.execute(
            "UPDATE integration SET check_seconds = 1, last_heard_at = now() - interval '1 hour'"
        )
        scheduler = ImportsApp(
            import_settings(database_url, day.command.port, scheduler_seconds=0.2)
        )
        await scheduler.start(0, workers=0, scheduler=True, grpc_port=0)
        try:
            ours = await day.wait_for_run(failed.id)
        finally:
            await scheduler.stop(grace=1)
        checks = await day.db.fetchval(
            "SELECT count(*) FROM integration_job WHERE kind = 'check' AND via = 'scheduler'"
        )
    # The newest run failed Scout's checks: on record as such, never skipped quietly.
    assert ours["status"] == "scout_failed"
    assert "the results page timed out" in ours["reason"]
    assert checks >= 1


async def test_two_imports_processes_share_the_queue(database_url: str) -> None:
    async with games_day(database_url, workers=2) as day:
        other = ImportsApp(import_settings(database_url, day.command.port))
        await other.start(0, workers=2, scheduler=False, grpc_port=0)
        try:
            schedule = await day.sim.make_run("schedule", wait_doorbell=True)
            first = await day.wait_for_run(schedule.id)
            for unit in day.sim.reference()["units"][:40]:
                day.sim.post_result(unit["externalId"], status="RUNNING")
            runs = [await day.sim.make_run("schedule", wait_doorbell=True) for _ in range(3)]
            finished = [await day.wait_for_run(run.id) for run in runs]
            await day.jobs_idle()
            claims = await day.db.fetch("SELECT attempts FROM integration_job")
            commands = await day.db.fetchval("SELECT count(*) FROM command")
            batches = await day.db.fetchval("SELECT sum(batch_total) FROM integration_run")
        finally:
            await other.stop(grace=1)
        await asyncio.sleep(0)
    assert first["status"] == "done"
    assert [r["status"] for r in finished] == ["done"] * 3
    # Every job claimed once, and every batch of every run written once, whoever ran it.
    assert [c["attempts"] for c in claims] == [1] * len(claims)
    assert commands == batches


async def test_the_row_log_keeps_thirty_days(database_url: str) -> None:
    async with games_day(database_url) as day:
        day.sim.malform_next_page("no_items")
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        for age in ("31 days", "29 days"):
            await day.db.execute(
                "INSERT INTO integration_row (run_id, integration_id, position, subject_key, "
                "subject_kind, outcome, created_at) "
                "VALUES ($1::uuid, $2::uuid, 0, $3, 'unit', 'problem', now() - $4::interval)",
                ours["id"],
                day.schedule_id,
                age,
                timedelta(days=int(age.split()[0])),
            )
        scheduler = ImportsApp(import_settings(database_url, day.command.port))
        await scheduler.start(0, workers=0, scheduler=True, grpc_port=0)
        try:
            await eventually(
                lambda: day.db.fetchval("SELECT array_agg(subject_key) FROM integration_row"),
                ["29 days"],
                within=5,
                every=0.1,
                what="the rows older than the keeping time gone",
            )
        finally:
            await scheduler.stop(grace=1)
