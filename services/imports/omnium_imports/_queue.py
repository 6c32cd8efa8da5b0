"""The import queue: enqueue, claim with SKIP LOCKED, renew the lease, finish."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from omnium_imports._sql import QUERIES
from omnium_telemetry import current_traceparent

JOB_CHANNEL = "omnium_import_job"


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    integration_id: str
    kind: str  # "pull": a run Scout named; "check": Scout's newest run
    scout_run_id: str | None
    via: str
    attempts: int
    run_id: str | None  # our run, when an earlier attempt recorded it
    past_guards: bool = False  # an operator's Start after a guard paused the run
    trace_context: str | None = None  # the ring's W3C traceparent, when tracing is on


async def enqueue_pull(
    conn: asyncpg.Connection, integration_id: str, scout_run_id: str
) -> int | None:
    """A doorbell's job; None when a doorbell queued this Scout run before. The job carries the
    ring's trace, which the run continues."""
    job_id: int | None = await conn.fetchval(
        *QUERIES.bind(
            "enqueue_pull",
            integration_id=integration_id,
            scout_run_id=scout_run_id,
            trace_context=current_traceparent(),
        )
    )
    if job_id is not None:
        await conn.execute("SELECT pg_notify($1, $2)", JOB_CHANNEL, str(job_id))
    return job_id


async def enqueue_start(conn: asyncpg.Connection, run_id: str) -> int | None:
    """An operator's Start of a run a guard paused: the same run, past its guards."""
    job_id: int | None = await conn.fetchval(QUERIES["enqueue_start"], run_id)
    if job_id is not None:
        await conn.execute("SELECT pg_notify($1, $2)", JOB_CHANNEL, str(job_id))
    return job_id


async def enqueue_resume(
    conn: asyncpg.Connection,
    run_id: str,
    *,
    first_seconds: float,
    max_seconds: float,
    tries: int,
    past_guards: bool,
) -> tuple[int, float] | None:
    """A partly done run, queued again after a growing wait: (job id, wait), or None when it
    has resumed `tries` times by itself already (or a job of it is queued)."""
    done = await resumes_of_run(conn, run_id)
    wait = min(first_seconds * 2**done, max_seconds)
    job_id: int | None = await conn.fetchval(
        *QUERIES.bind(
            "enqueue_resume",
            run_id=run_id,
            wait_seconds=wait,
            max_resumes=tries,
            past_guards=past_guards,
        )
    )
    # No NOTIFY: the job may not be claimed before its wait is over; the workers' poll finds it.
    return None if job_id is None else (job_id, wait)


async def resumes_of_run(conn: asyncpg.Connection, run_id: str) -> int:
    """How often the run has been queued again by itself."""
    done: int = await conn.fetchval(QUERIES["resumes_of_run"], run_id)
    return done


async def enqueue_check(conn: asyncpg.Connection, integration_id: str, via: str) -> int | None:
    job_id: int | None = await conn.fetchval(QUERIES["enqueue_check"], integration_id, via)
    if job_id is not None:
        await conn.execute("SELECT pg_notify($1, $2)", JOB_CHANNEL, str(job_id))
    return job_id


async def claim(conn: asyncpg.Connection, worker: str, lease_seconds: float) -> Job | None:
    try:
        row = await conn.fetchrow(QUERIES["claim"], worker, lease_seconds)
    except asyncpg.UniqueViolationError:
        # Another worker started a job of the same integration this instant.
        return None
    return None if row is None else Job(**dict(row))


async def renew(conn: asyncpg.Connection, job: Job, worker: str, lease_seconds: float) -> bool:
    renewed = await conn.fetchval(
        *QUERIES.bind("renew", job_id=job.id, worker=worker, lease_seconds=lease_seconds)
    )
    return renewed is not None


async def finish(
    conn: asyncpg.Connection,
    job: Job,
    worker: str,
    *,
    failed: bool,
    error: str | None = None,
    run_id: str | None = None,
) -> bool:
    status = "failed" if failed else "done"
    done = await conn.fetchval(
        *QUERIES.bind(
            "finish", job_id=job.id, worker=worker, status=status, error=error, run_id=run_id
        )
    )
    return done is not None


async def release(conn: asyncpg.Connection, job: Job, worker: str) -> bool:
    """A stopping worker's job, queued again with its run; the other copies are woken."""
    released = await conn.fetchval(QUERIES["release"], job.id, worker)
    if released is not None:
        await conn.execute("SELECT pg_notify($1, $2)", JOB_CHANNEL, str(job.id))
    return released is not None


async def attach_run(conn: asyncpg.Connection, job: Job, run_id: str) -> None:
    await conn.execute(QUERIES["attach_run"], job.id, run_id)


async def queue_quiet_integrations(conn: asyncpg.Connection) -> list[int]:
    """One check job for each integration not heard from for its check_seconds."""
    queued: list[int] = []
    async with conn.transaction():
        for row in await conn.fetch(QUERIES["quiet_integrations"]):
            job_id = await enqueue_check(conn, row["id"], "scheduler")
            if job_id is not None:
                queued.append(job_id)
    return queued
