"""Workers take jobs from the queue and hold their lease while the run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from omnium_db import DATABASE_ERRORS, outlast
from omnium_imports import _queue
from omnium_imports._metrics import RUNS
from omnium_imports._review import Alerts
from omnium_imports._sql import QUERIES
from omnium_imports.run import HandedOver, Pipeline, RunResult
from omnium_settings import Settings

log = logging.getLogger(__name__)
# Longest a stopping worker spends giving its job back; past it the lease hands it over.
HAND_OVER_SECONDS = 2.0
_HAND_OVER_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *DATABASE_ERRORS)


class LeaseLost(Exception):
    """Another worker took the job after our lease ran out; we must not touch it again."""


class Worker:
    """Claims one job at a time. Several run per process, and many processes share the queue."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool, pipeline: Pipeline, n: int) -> None:
        self.settings = settings
        self.pool = pool
        self.pipeline = pipeline
        # Unique even for two apps in one process (tests): the lease is checked by this name.
        self.name = f"{socket.gethostname()}:{os.getpid()}:{n}:{secrets.token_hex(2)}"
        self.wake = asyncio.Event()
        self.results: list[RunResult] = []  # kept short; the tests and the log read it

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with self.pool.acquire() as conn:
                    job = await _queue.claim(
                        conn, self.name, self.settings.imports.lease_expire_seconds
                    )
            except DATABASE_ERRORS as exc:
                log.warning("%s: cannot read the queue (%s); trying again", self.name, exc)
                job = None
            if job is None:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.imports.poll_seconds):
                        await _first(self.wake.wait(), stop.wait())
                continue
            try:
                await self.work(job)
            except DATABASE_ERRORS as exc:
                # The database stayed away longer than the job's own retries: its lease runs
                # out and a worker (this one, later) continues the run. The worker lives on.
                log.warning("%s: job %s left to its lease (%s)", self.name, job.id, exc)

    async def work(self, job: _queue.Job) -> RunResult | None:
        log.info(
            "%s: job %s (%s, %s) of integration %s",
            self.name,
            job.id,
            job.kind,
            job.via,
            job.integration_id,
        )
        task = asyncio.ensure_future(self.pipeline.run_job(job))
        renewing = asyncio.ensure_future(self._renew(job, task))
        try:
            result = await task
        except asyncio.CancelledError:
            if renewing.done() and isinstance(renewing.exception(), LeaseLost):
                log.warning(
                    "%s: lost the lease of job %s; another worker carries on", self.name, job.id
                )
                return None
            # The process stops and its grace is over: the batch in flight was cut (if it was
            # saved, it answers duplicate to the copy that sends it again).
            renewing.cancel()
            await self._hand_over(job)
            raise
        except HandedOver:
            renewing.cancel()
            await self._hand_over(job)
            return None
        except Exception as exc:
            log.exception("%s: job %s failed", self.name, job.id)
            result = RunResult("failed", reason=f"something went wrong on our side: {exc}")
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLost):
                await renewing
        self.results = [*self.results[-99:], result]
        RUNS.labels(result.status).inc()
        resumed = await outlast(
            lambda: self._finish(job, result),
            what=f"{self.name}: job {job.id}",
            seconds=self.settings.imports.database_retry_seconds,
            first_wait=self.settings.imports.database_retry_first_seconds,
            max_wait=self.settings.imports.database_retry_max_seconds,
            log=log,
        )
        log.info(
            "%s: job %s %s%s",
            self.name,
            job.id,
            result.status,
            f" ({result.reason})" if result.reason else "",
        )
        if resumed is not None:
            log.info(
                "%s: run %s resumes by itself in %.0f s (job %s)",
                self.name,
                result.run_id,
                resumed[1],
                resumed[0],
            )
        return result

    async def _finish(self, job: _queue.Job, result: RunResult) -> tuple[int, float] | None:
        """The job closed and, for a run left partly done, its resume queued, in one
        transaction (tried again as a whole if the database goes meanwhile)."""
        settings = self.settings
        async with self.pool.acquire() as conn, conn.transaction():
            await _queue.finish(
                conn,
                job,
                self.name,
                failed=result.status == "failed",
                error=result.reason,
                run_id=result.run_id,
            )
            if result.status != "partly_done" or result.run_id is None:
                return None
            # The batches not saved (a failover outlasting their retries, say) are sent again
            # into the same run; those saved answer duplicate, so nothing is written twice.
            resumed = await _queue.enqueue_resume(
                conn,
                result.run_id,
                first_seconds=settings.imports.resume_first_seconds,
                max_seconds=settings.imports.resume_max_seconds,
                tries=settings.imports.resume_tries,
                past_guards=job.past_guards,
            )
            if resumed is None:
                await self._stop_resuming(conn, job, result.run_id, result.reason or "")
            else:
                at = datetime.now(UTC) + timedelta(seconds=resumed[1])
                tries = await _queue.resumes_of_run(conn, result.run_id)
                await conn.execute(
                    QUERIES["note_resume"],
                    result.run_id,
                    f"It resumes by itself at {at:%H:%M:%S} UTC (resume {tries} of "
                    f"{settings.imports.resume_tries}; after the last it waits for you).",
                )
            return resumed

    async def _stop_resuming(
        self, conn: asyncpg.Connection, job: _queue.Job, run_id: str, reason: str
    ) -> None:
        """A run that has resumed by itself `resume_tries` times waits for a person: its reason
        says so, and so does its alert (one alert: raised now if it was not yet)."""
        resumes = await _queue.resumes_of_run(conn, run_id)
        if resumes < self.settings.imports.resume_tries:
            return  # not given up: a resume of it is queued already
        waiting = _waiting_reason(reason, resumes)
        await conn.execute(QUERIES["stop_resuming"], run_id, waiting)
        # The open alert (raised after alert_batch_failed_times) now says it waits; one is
        # raised if it is not open yet (resume_tries below that number).
        await self.pipeline.alerts.restate(
            conn,
            job.integration_id,
            "batch_failed",
            f"Run partly done, waiting for you: {waiting}",
            run_id,
        )

    async def _hand_over(self, job: _queue.Job) -> None:
        """The job back to the queue with its run, so another copy continues it now rather
        than after the lease. Failing that, the lease still hands it over when it runs out."""
        try:
            async with asyncio.timeout(HAND_OVER_SECONDS), self.pool.acquire() as conn:
                released = await _queue.release(conn, job, self.name)
        except _HAND_OVER_ERRORS as exc:
            log.warning(
                "%s: job %s not handed over (%s); another copy takes it after its lease",
                self.name,
                job.id,
                exc,
            )
            return
        if released:
            log.info("%s: job %s handed over; another copy continues its run", self.name, job.id)

    async def _renew(self, job: _queue.Job, task: asyncio.Future[RunResult]) -> None:
        while True:
            await asyncio.sleep(self.settings.imports.lease_renew_seconds)
            try:
                async with self.pool.acquire() as conn:
                    held = await _queue.renew(
                        conn, job, self.name, self.settings.imports.lease_expire_seconds
                    )
            except DATABASE_ERRORS as exc:
                log.warning("%s: could not renew job %s (%s)", self.name, job.id, exc)
                continue
            if not held:
                task.cancel()
                raise LeaseLost(job.id)


def _waiting_reason(reason: str, resumes: int) -> str:
    tried = (
        f"It resumed by itself {resumes} times and the batches still could not be saved"
        if resumes
        else "It does not resume by itself (OMNIUM_RESUME_TRIES is 0)"
    )
    return (
        f"{reason} {tried}, so it waits for you: put right what stopped the batches, then "
        "press Run now on this integration."
    ).strip()


async def _first(*waits: object) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[call-overload]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def run_scheduler(
    settings: Settings, pool: asyncpg.Pool, stop: asyncio.Event, alerts: Alerts
) -> None:
    """Every scheduler_seconds: a check for each integration not heard from for its interval,
    an alert for one with no new run for alert_quiet_intervals, runs left without a job
    swept, and (every row_log_trim_seconds) row log trimming.
    """
    # None: trim on the first pass. (0.0 would wait until the machine had been up an hour,
    # since time.monotonic() counts from boot.)
    trimmed_at: float | None = None
    while not stop.is_set():
        try:
            async with pool.acquire() as conn:
                queued = await _queue.queue_quiet_integrations(conn)
                await sweep_abandoned_runs(settings, conn, alerts)
                for row in await conn.fetch(
                    QUERIES["quiet_for_long"], settings.imports.alert_quiet_intervals
                ):
                    await alerts.raise_(
                        conn,
                        row["id"],
                        "quiet",
                        f"No new run from Scout for {row['intervals']} check "
                        f"intervals ({row['check_seconds']} s each).",
                    )
                trim_every = settings.imports.row_log_trim_seconds
                if trimmed_at is None or time.monotonic() - trimmed_at > trim_every:
                    trimmed_at = time.monotonic()
                    result = await conn.execute(
                        QUERIES["trim_row_log"], settings.imports.row_log_days
                    )
                    log.info("scheduler: row log trimmed (%s)", result)
            if queued:
                log.info("scheduler: queued checks %s", queued)
        except DATABASE_ERRORS as exc:
            log.warning("scheduler: cannot reach the database (%s)", exc)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(settings.imports.scheduler_seconds):
                await stop.wait()


async def sweep_abandoned_runs(settings: Settings, conn: asyncpg.Connection, alerts: Alerts) -> int:
    """Runs left received or applying past the lease with no job on them: closed failed, each
    with an alert. Answers how many."""
    swept = await conn.fetch(QUERIES["sweep_abandoned_runs"], settings.imports.lease_expire_seconds)
    for run in swept:
        log.warning("run %s swept: %s", run["id"], run["reason"])
        await alerts.raise_(
            conn, run["integration_id"], "run_failed", f"Run failed: {run['reason']}", run["id"]
        )
    return len(swept)
