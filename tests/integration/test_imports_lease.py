"""A worker killed mid-run (SIGKILL, a real process): after its lease runs out another worker
takes the job, continues the same run, and no batch is written twice."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time

import asyncpg

from omnium.command.v1 import command_pb2_grpc
from omnium_devstack.stack import dev_process_environ
from omnium_imports import Pipeline, ScoutClient
from omnium_imports._worker import Worker
from tests.support.command import CALLERS_ENV, TOKEN
from tests.support.delivery import query_until
from tests.support.imports import GamesDay, games_day
from tests.support.waiting import eventually

LEASE = 3.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _start_worker_process(day: GamesDay) -> asyncio.subprocess.Process:
    env = dev_process_environ()
    env |= {
        "OMNIUM_DATABASE_URL": day.database_url,
        "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{day.command.port}",
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_DOORBELL_PORT": str(_free_port()),
        "OMNIUM_IMPORTS_PORT": str(_free_port()),
        "OMNIUM_GRPC_CALLERS": CALLERS_ENV,
        "OMNIUM_LEASE_RENEW_SECONDS": "0.5",
        "OMNIUM_LEASE_EXPIRE_SECONDS": str(LEASE),
        "OMNIUM_IMPORTS_POLL_SECONDS": "0.2",
        "OMNIUM_IMPORTS_WORKERS": "1",
        "OMNIUM_IMPORTS_NICE": "0",
        "OMNIUM_GRPC_DEADLINE_SECONDS": "60",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "omnium_imports",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_a_killed_worker_s_run_is_finished_by_another(database_url: str) -> None:
    async with games_day(
        database_url, workers=0, command_settings={"import_lock_timeout_seconds": 60.0}
    ) as day:
        process = await _start_worker_process(day)
        try:
            first = await day.sim.make_run("schedule", wait_doorbell=True)
            await query_until(
                day.db,
                "SELECT status = 'done' FROM integration_run WHERE scout_run_id = $1",
                first.id,
            )
            # The second run will block on one unit's lock, half way through its batches.
            units = day.sim.reference()["units"]
            for unit in units:
                day.sim.reschedule(unit["externalId"], venue="Moved")
            codes = sorted(
                await day.db.fetch("SELECT id::text, code FROM unit ORDER BY id"),
                key=lambda r: r["id"],
            )
            held = codes[len(codes) // 2]["id"]
            blocker = await asyncpg.connect(database_url)
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", held)
            second = await day.sim.make_run("schedule", wait_doorbell=True)
            run_id = await _wait_run_id(day, second.id)
            await query_until(
                day.db, "SELECT batch_done >= 20 FROM integration_run WHERE id = $1", run_id
            )
            await asyncio.sleep(0.5)
            process.send_signal(signal.SIGKILL)
            await process.wait()
            killed_at = time.monotonic()
            # Counted while the lock is still held: the blocked batch cannot have landed yet.
            done_before = await day.db.fetchval(
                "SELECT batch_done FROM integration_run WHERE id = $1", run_id
            )
            await tx.rollback()
            await blocker.close()
            # Another worker, in this process: it must wait for the lease to run out.
            settings = day.imports.settings
            assert day.imports.pool is not None
            scout = ScoutClient(settings)
            pipeline = Pipeline(
                settings,
                day.imports.pool,
                scout,
                command_pb2_grpc.CommandServiceStub(day.imports.channel),
            )
            worker = Worker(settings, day.imports.pool, pipeline, 7)
            stop = asyncio.Event()
            task = asyncio.create_task(worker.run(stop))
            ours = await day.wait_for_run(second.id, seconds=60)
            taken_after = time.monotonic() - killed_at
            stop.set()
            worker.wake.set()
            await task
            await scout.close()
            job = await day.db.fetchrow(
                "SELECT status, attempts, worker FROM integration_job WHERE run_id = $1", run_id
            )
            commands = await day.db.fetchval(
                "SELECT count(*) FROM command WHERE command_id LIKE $1", f"{run_id}:%"
            )
            logged = await day.db.fetchval(
                "SELECT count(*) FROM timeline_item WHERE subject_id = $1::uuid", run_id
            )
            moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert ours["status"] == "done", ours["reason"]
    assert 0 < done_before < ours["batch_total"]
    assert taken_after >= LEASE - 1.0  # not taken while the dead worker's lease still held
    assert job["status"] == "done" and job["attempts"] == 2 and ":7:" in job["worker"]
    # Each batch once: one command, one log item, one batch_done step per batch.
    assert commands == logged == ours["batch_done"] == ours["batch_total"]
    assert moved == len(units)


async def _wait_run_id(day: GamesDay, scout_run_id: str) -> str:
    run_id = await eventually(
        lambda: day.db.fetchval(
            "SELECT id::text FROM integration_run WHERE scout_run_id = $1", scout_run_id
        ),
        within=30,
        what="the run to be recorded",
    )
    return str(run_id)
