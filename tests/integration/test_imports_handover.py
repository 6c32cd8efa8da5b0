"""An imports copy told to stop mid-run gives its job back at once: another copy, on the same
database, continues the same run within seconds (not after the 60 s lease), and no batch is
written twice."""

from __future__ import annotations

import time

import asyncpg

from omnium_imports import ImportsApp
from tests.support.delivery import query_until
from tests.support.imports import games_day
from tests.support.imports import import_settings as imports_settings

LEASE = 60.0  # the real lease: only a hand-over can explain a continuation within seconds
HANDED_OVER_WITHIN = 10.0


async def test_a_stopping_copy_hands_its_run_to_the_other(database_url: str) -> None:
    async with games_day(
        database_url, workers=0, command_settings={"import_lock_timeout_seconds": 60.0}
    ) as day:
        # Two copies of the imports process beside the doorbell's: A runs the job, B waits.
        settings = imports_settings(
            database_url,
            day.command.port,
            lease_expire_seconds=LEASE,
            imports_stop_grace_seconds=1.0,
        )
        copy_a, copy_b = ImportsApp(settings), ImportsApp(settings)
        await copy_a.start(0, workers=1, scheduler=False, grpc_port=0)
        try:
            first = await day.sim.make_run("schedule", wait_doorbell=True)
            await day.wait_for_run(first.id)
            # The second run blocks on one unit's lock, half way through its batches.
            units = day.sim.reference()["units"]
            for unit in units:
                day.sim.reschedule(unit["externalId"], venue="Moved")
            codes = sorted(
                await day.db.fetch("SELECT id::text FROM unit ORDER BY id"), key=lambda r: r["id"]
            )
            blocker = await asyncpg.connect(database_url)
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute(
                "SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", codes[len(codes) // 2]["id"]
            )
            second = await day.sim.make_run("schedule", wait_doorbell=True)
            run_id = await query_until(
                day.db,
                "SELECT id::text FROM integration_run WHERE scout_run_id = $1",
                second.id,
                within=30,
            )
            await query_until(
                day.db,
                "SELECT batch_done >= 20 FROM integration_run WHERE id = $1",
                run_id,
                within=30,
            )
            job_id = await day.db.fetchval(
                "SELECT id FROM integration_job WHERE run_id = $1 AND status = 'running'", run_id
            )
            await copy_b.start(0, workers=1, scheduler=False, grpc_port=0)
            stopped_at = time.monotonic()
            await copy_a.stop()
            stop_took = time.monotonic() - stopped_at
            # B claims the job A gave back (B's worker name on it), well inside A's lease.
            taken = await query_until(
                day.db,
                "SELECT worker FROM integration_job "
                "WHERE id = $1 AND status = 'running' AND worker = $2",
                job_id,
                copy_b.workers[0].name,
                within=HANDED_OVER_WITHIN,
            )
            taken_after = time.monotonic() - stopped_at
            # Counted while the lock is still held: the blocked batch cannot have landed yet.
            done_before = await day.db.fetchval(
                "SELECT batch_done FROM integration_run WHERE id = $1", run_id
            )
            await tx.rollback()
            await blocker.close()
            ours = await day.wait_for_run(second.id, seconds=60)
            job = await day.db.fetchrow(
                "SELECT status, attempts, run_id::text FROM integration_job WHERE id = $1", job_id
            )
            runs = await day.db.fetchval(
                "SELECT count(*) FROM integration_run WHERE scout_run_id = $1", second.id
            )
            commands = await day.db.fetchval(
                "SELECT count(*) FROM command WHERE command_id LIKE $1", f"{run_id}:%"
            )
            logged = await day.db.fetchval(
                "SELECT count(*) FROM timeline_item WHERE subject_id = $1::uuid", run_id
            )
            moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
        finally:
            await copy_b.stop(grace=2)
            if not copy_a.stopping.is_set():
                await copy_a.stop(grace=2)
    assert stop_took < 5  # the grace (1 s) cut the blocked batch; no waiting on the lock
    assert taken and taken_after < HANDED_OVER_WITHIN
    assert ours["status"] == "done", ours["reason"]
    assert 0 < done_before < ours["batch_total"]
    # The same job and the same run, continued: A's attempt and B's.
    assert job["status"] == "done" and job["attempts"] == 2 and job["run_id"] == run_id
    assert runs == 1
    # Each batch once: one command, one log item, one batch_done step per batch.
    assert commands == logged == ours["batch_done"] == ours["batch_total"]
    assert moved == len(units)
