"""What the imports process shows on /metrics: the queue, runs and batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
from prometheus_client import Counter, Gauge

from omnium_db import DATABASE_ERRORS
from omnium_imports._sql import QUERIES
from omnium_settings import Settings

log = logging.getLogger(__name__)

QUEUE_JOBS = Gauge("omnium_imports_queue_jobs", "Jobs in the import queue, by status.", ["status"])
QUEUE_OLDEST = Gauge(
    "omnium_imports_queue_oldest_seconds",
    "How long the oldest queued job has waited for a worker; 0 with none waiting.",
)
RUNS = Counter(
    "omnium_imports_runs",
    "Jobs this process finished, by outcome (done, partly_done, paused, failed, ...).",
    ["outcome"],
)
BATCHES = Counter(
    "omnium_imports_batches",
    "Batches sent to command, by how it ended (saved or not_saved).",
    ["outcome"],
)
# Each known outcome from the start, at 0: a rate over the first run is then a rate, and the
# dashboard and alert rules find the series before anything has happened.
for _outcome in ("done", "partly_done", "nothing_new", "paused_by_guard", "scout_failed", "failed"):
    RUNS.labels(_outcome)
for _outcome in ("saved", "not_saved"):
    BATCHES.labels(_outcome)
BATCH_RETRIES = Counter(
    "omnium_imports_batch_retries",
    "Batch sends tried again: command answered try_again or could not be reached.",
)


async def sample_queue(pool: asyncpg.Pool, settings: Settings, stop: asyncio.Event) -> None:
    """Reads the queue's depth and age every `metrics_sample_seconds` until `stop`."""
    while not stop.is_set():
        try:
            async with pool.acquire() as conn:
                row = await conn.fetchrow(QUERIES["queue_depth"])
            QUEUE_JOBS.labels("queued").set(row["queued"])
            QUEUE_JOBS.labels("running").set(row["running"])
            QUEUE_OLDEST.set(row["oldest"])
        except DATABASE_ERRORS as exc:
            log.debug("imports: the queue could not be read for /metrics (%s)", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), settings.telemetry.metrics_sample_seconds)
