"""An imports copy told to stop mid-run gives its job back at once: another copy, on the same
database, continues the same run within seconds (not after the 60 s lease), and no batch is
written twice. Once with `stop()` called in this process, once with SIGTERM sent to a real
`python -m omnium_imports`, as Kubernetes or the dev stack's launcher stops a copy."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx

from omnium_devstack import free_port
from omnium_devstack.stack import dev_process_environ
from omnium_imports import ImportsApp
from tests.support.command import CALLERS_ENV, TOKEN
from tests.support.delivery import query_until
from tests.support.imports import GamesDay, games_day
from tests.support.imports import import_settings as imports_settings
from tests.support.waiting import eventually

LEASE = 60.0  # the real lease: only a hand-over can explain a continuation within seconds
HANDED_OVER_WITHIN = 10.0
STOP_GRACE = 1.0  # the batches' grace: the blocked batch is cut after it


@dataclass(slots=True)
class BlockedRun:
    """The second schedule run, its batches blocked half way on one unit's lock."""

    scout_run_id: str
    run_id: str
    job_id: int
    units: int
    blocker: asyncpg.Connection

    async def let_go(self) -> None:
        await self.blocker.execute("ROLLBACK")


@asynccontextmanager
async def blocked_run(day: GamesDay, database_url: str, holder: str) -> AsyncIterator[BlockedRun]:
    """A first run makes the units; the second moves every one of them and blocks on the
    middle one, with its job running in the worker whose name matches `holder` (LIKE)."""
    first = await day.sim.make_run("schedule", wait_doorbell=True)
    await day.wait_for_run(first.id)
    units = day.sim.reference()["units"]
    for unit in units:
        day.sim.reschedule(unit["externalId"], venue="Moved")
    ids = await day.db.fetch("SELECT id FROM unit ORDER BY id")
    blocker = await asyncpg.connect(database_url)
    try:
        await blocker.execute("BEGIN")
        await blocker.execute(
            "SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", ids[len(ids) // 2]["id"]
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
        job_id = await query_until(
            day.db,
            "SELECT id FROM integration_job WHERE run_id = $1 AND status = 'running' "
            "AND worker LIKE $2",
            run_id,
            holder,
            within=30,
        )
        yield BlockedRun(second.id, run_id, job_id, len(units), blocker)
    finally:
        await blocker.close()


async def taken_by(day: GamesDay, run: BlockedRun, worker: str) -> float:
    """Seconds until `worker` holds the run's job, failing after HANDED_OVER_WITHIN."""
    started = time.monotonic()
    await query_until(
        day.db,
        "SELECT worker FROM integration_job WHERE id = $1 AND status = 'running' AND worker = $2",
        run.job_id,
        worker,
        within=HANDED_OVER_WITHIN,
    )
    return time.monotonic() - started


async def check_continued(day: GamesDay, run: BlockedRun, done_before: int) -> None:
    """The same job and the same run finished, A's attempt and B's, each batch written once."""
    ours = await day.wait_for_run(run.scout_run_id, seconds=60)
    job = await day.db.fetchrow(
        "SELECT status, attempts, run_id::text FROM integration_job WHERE id = $1", run.job_id
    )
    runs = await day.db.fetchval(
        "SELECT count(*) FROM integration_run WHERE scout_run_id = $1", run.scout_run_id
    )
    commands = await day.db.fetchval(
        "SELECT count(*) FROM command WHERE command_id LIKE $1", f"{run.run_id}:%"
    )
    logged = await day.db.fetchval(
        "SELECT count(*) FROM timeline_item WHERE subject_id = $1::uuid", run.run_id
    )
    moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
    assert ours["status"] == "done", ours["reason"]
    assert 0 < done_before < ours["batch_total"]
    assert job["status"] == "done" and job["attempts"] == 2 and job["run_id"] == run.run_id
    assert runs == 1
    # One command, one log item, one batch_done step per batch.
    assert commands == logged == ours["batch_done"] == ours["batch_total"]
    assert moved == run.units


async def batches_done(day: GamesDay, run: BlockedRun) -> int:
    # Counted while the lock is still held: the blocked batch cannot have landed yet.
    done: int = await day.db.fetchval(
        "SELECT batch_done FROM integration_run WHERE id = $1::uuid", run.run_id
    )
    return done


async def test_a_stopping_copy_hands_its_run_to_the_other(database_url: str) -> None:
    async with games_day(
        database_url, workers=0, command_settings={"import_lock_timeout_seconds": 60.0}
    ) as day:
        # Two copies of the imports process beside the doorbell's: A runs the job, B waits.
        settings = imports_settings(
            database_url,
            day.command.port,
            lease_expire_seconds=LEASE,
            imports_stop_grace_seconds=STOP_GRACE,
        )
        copy_a, copy_b = ImportsApp(settings), ImportsApp(settings)
        await copy_a.start(0, workers=1, scheduler=False, grpc_port=0)
        try:
            async with blocked_run(day, database_url, copy_a.workers[0].name) as run:
                await copy_b.start(0, workers=1, scheduler=False, grpc_port=0)
                stopped_at = time.monotonic()
                await copy_a.stop()
                stop_took = time.monotonic() - stopped_at
                # B claims the job A gave back (B's worker name on it), well inside A's lease.
                taken_after = await taken_by(day, run, copy_b.workers[0].name)
                done_before = await batches_done(day, run)
                await run.let_go()
                await check_continued(day, run, done_before)
        finally:
            await copy_b.stop(grace=2)
            if not copy_a.stopping.is_set():
                await copy_a.stop(grace=2)
    assert stop_took < 5  # the grace (1 s) cut the blocked batch; no waiting on the lock
    assert taken_after < HANDED_OVER_WITHIN


async def test_a_sigtermed_imports_process_hands_its_run_to_another_copy(
    database_url: str, tmp_path: Path
) -> None:
    async with games_day(
        database_url, workers=0, command_settings={"import_lock_timeout_seconds": 60.0}
    ) as day:
        doorbell = free_port()
        log = tmp_path / "imports.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "omnium_imports",
                env=_env(database_url, day.command.port, doorbell),
                stdout=out,
                stderr=out,
            )
        copy_b = ImportsApp(
            imports_settings(
                database_url,
                day.command.port,
                lease_expire_seconds=LEASE,
                imports_stop_grace_seconds=STOP_GRACE,
            )
        )
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                await eventually(
                    lambda: _ready(http, f"http://127.0.0.1:{doorbell}", process, log),
                    within=60,
                    what="the imports process to be ready",
                )
            # Its worker names carry its pid: the job is in that process.
            async with blocked_run(day, database_url, f"%:{process.pid}:%") as run:
                await copy_b.start(0, workers=1, scheduler=False, grpc_port=0)
                process.send_signal(signal.SIGTERM)
                taken_after = await taken_by(day, run, copy_b.workers[0].name)
                done_before = await batches_done(day, run)
                async with asyncio.timeout(30):
                    exit_code = await process.wait()
                await run.let_go()
                await check_continued(day, run, done_before)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await copy_b.stop(grace=2)
    said = log.read_text()
    assert exit_code == 0, said
    assert taken_after < HANDED_OVER_WITHIN
    assert f"job {run.job_id} handed over" in said, said


def _env(database_url: str, command_port: int, doorbell_port: int) -> dict[str, str]:
    """The process as a deployment starts it, on free ports, with the test's short waits."""
    env = dev_process_environ()
    return env | {
        "OMNIUM_DATABASE_URL": database_url,
        "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{command_port}",
        "OMNIUM_GRPC_CALLERS": CALLERS_ENV,
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_GRPC_DEADLINE_SECONDS": "30",
        "OMNIUM_DOORBELL_PORT": str(doorbell_port),
        "OMNIUM_IMPORTS_PORT": "0",
        "OMNIUM_IMPORTS_WORKERS": "1",
        # At the test's own pace, not behind it on a busy machine.
        "OMNIUM_IMPORTS_NICE": "0",
        "OMNIUM_IMPORTS_POLL_SECONDS": "0.2",
        "OMNIUM_SCOUT_RETRY_BASE_SECONDS": "0.01",
        "OMNIUM_LEASE_RENEW_SECONDS": "0.5",
        "OMNIUM_LEASE_EXPIRE_SECONDS": str(LEASE),
        "OMNIUM_IMPORTS_STOP_GRACE_SECONDS": str(STOP_GRACE),
        "OMNIUM_LOG_LEVEL": "INFO",
    }


async def _ready(
    http: httpx.AsyncClient, url: str, process: asyncio.subprocess.Process, log: Path
) -> bool:
    if process.returncode is not None:
        said = await asyncio.to_thread(log.read_text)
        raise AssertionError(f"the imports process exited:\n{said}")
    try:
        return (await http.get(f"{url}/readyz")).status_code == 200
    except httpx.TransportError:
        return False
