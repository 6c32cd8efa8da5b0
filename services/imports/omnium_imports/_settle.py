"""The settle window: a result is read again after it first says official — hourly for the
first hours, then every 6 hours, then daily, up to 72 hours (a protest decided late)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import asyncpg

from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow
from omnium_settings import Settings


def first_read(now: datetime, settings: Settings) -> datetime:
    return now + timedelta(hours=settings.imports.settle_first_hours)


def next_read(official_at: datetime, now: datetime, settings: Settings) -> datetime | None:
    """When to read the key again after reading it `now`; None once the window has closed."""
    elapsed = now - official_at
    if elapsed < timedelta(hours=settings.imports.settle_hourly_until_hours):
        step = timedelta(hours=settings.imports.settle_hourly_step_hours)
    elif elapsed < timedelta(hours=settings.imports.settle_six_hourly_until_hours):
        step = timedelta(hours=settings.imports.settle_six_hourly_step_hours)
    else:
        step = timedelta(hours=settings.imports.settle_daily_step_hours)
    end = official_at + timedelta(hours=settings.imports.settle_until_hours)
    if now >= end:
        return None
    return min(now + step, end)


async def open_windows(
    conn: asyncpg.Connection,
    settings: Settings,
    integration_id: str,
    build: str | None,
    mapped: Sequence[MappedRow],
    source_at: datetime | None = None,
) -> None:
    """Official rows open their settle window; a page run moves its keys on.

    The window starts when the source said official, as near as we know it: when Scout read
    the page (`source_at`, its run's finish), not when this run got to it, which may be hours
    later (a backlog, a run resumed late)."""
    now = datetime.now(UTC)
    official_at = min(source_at, now) if source_at is not None else now
    official = [
        row.key
        for row in mapped
        if row.key and row.outcome == "ok" and row.value.get("status") == "OFFICIAL"
    ]
    if official:
        await conn.execute(
            *QUERIES.bind(
                "mark_official",
                integration_id=integration_id,
                subject_keys=official,
                next_read_at=first_read(official_at, settings),
                official_at=official_at,
            )
        )
    if build == "page":
        listed = [row.key for row in mapped if row.key]
        settling = await conn.fetch(QUERIES["settling"], integration_id, listed)
        if settling:
            await conn.execute(
                *QUERIES.bind(
                    "settle_listed",
                    integration_id=integration_id,
                    subject_keys=[row["subject_key"] for row in settling],
                    next_reads=[next_read(row["official_at"], now, settings) for row in settling],
                )
            )
