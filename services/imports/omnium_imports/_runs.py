"""A run in PostgreSQL: its integration, what it maps with, its record, its batches, its close."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import TypedDict, TypeVar, cast

import asyncpg

from omnium_imports import _batches
from omnium_imports._queue import Job
from omnium_imports._scout import ScoutRun
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow, MappingContext, MappingVersion

_T = TypeVar("_T")

# A run ending so settles the guard pauses it overtook: its own (written, or older), and
# those of older runs (Start would end them older).
_NO_LONGER_PAUSED = frozenset({"done", "partly_done", "older"})

# A batch: each row with our id of the unit it names, when we know it.
Batch = list[tuple[MappedRow, str | None]]


class IntegrationSettings(TypedDict, total=False):
    """An integration's own settings (its settings JSON): each overrides the service's."""

    min_share: float
    usual_runs: int
    max_not_placed: float
    max_refused: float
    max_cleared: int
    max_reopened: int
    missing_runs_to_review: int
    auto_cancel_missing: bool
    alert_scout_failed_in_row: int
    alert_batch_failed_times: int
    alert_quiet_intervals: int


@dataclass(frozen=True, slots=True)
class Integration:
    id: str
    code: str
    state: str
    target: str
    base_url: str
    job: str
    creates_units: bool
    version: int | None
    event_code: str
    time_zone: str
    spec: Mapping[str, object] | None  # the current version's mapping JSON
    settings: IntegrationSettings = field(default_factory=IntegrationSettings)


async def integration(conn: asyncpg.Connection, integration_id: str) -> Integration | None:
    row = await conn.fetchrow(QUERIES["integration"], integration_id)
    if row is None:
        return None
    return Integration(
        id=row["id"],
        code=row["code"],
        state=row["state"],
        target=row["target"],
        base_url=row["scout_base_url"],
        job=row["scout_job"],
        creates_units=row["creates_units"],
        version=row["current_version"],
        event_code=row["event_code"],
        time_zone=row["time_zone"],
        spec=row["spec"],
        settings=cast("IntegrationSettings", dict(row["settings"] or {})),
    )


async def mapped(
    conn: asyncpg.Connection, integration: Integration, version: MappingVersion, items: list[object]
) -> list[MappedRow]:
    """Map a run's rows with the integration's lookups."""
    context = await mapping_context(conn, integration)
    return paused_gc(lambda: version.map_rows(items, context))


async def mapping_context(conn: asyncpg.Connection, integration: Integration) -> MappingContext:
    """What mapping needs besides the rows: the event's time zone and the lookups."""
    lookups: dict[str, dict[str, str]] = {}
    for row in await conn.fetch(QUERIES["lookups"], integration.id):
        lookups.setdefault(row["kind"], {})[row["external_id"]] = row["our_id"]
    return MappingContext(integration.time_zone, lookups)


def paused_gc(work: Callable[[], _T]) -> _T:
    """Mapping with the cycle collector paused: mapping makes no reference cycles, and tens of
    thousands of new rows would set it off for nothing."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return work()
    finally:
        if paused:
            gc.enable()


async def unit_ids(
    conn: asyncpg.Connection, integration: Integration, ready: list[MappedRow]
) -> dict[str, str]:
    """Our ids of the units the rows name by code, for placing and sorting the batches."""
    codes = [str(row.value.get("code")) for row in ready if row.value.get("code")]
    if integration.target != "unit" or not codes:
        return {}
    return dict(await conn.fetch(QUERIES["unit_ids_by_code"], integration.id, codes))


async def record(
    conn: asyncpg.Connection,
    integration: Integration,
    job: Job,
    run: ScoutRun,
    status: str,
    reason: str | None,
) -> str:
    """The run on record with this status, and the job pointing at it; its id."""
    statement = QUERIES.statement("record_run")
    row = await conn.fetchrow(
        statement.text,
        *statement.args(
            {
                "integration_id": integration.id,
                "scout_run_id": run.id,
                "status": status,
                "scout_status": run.status,
                "build": run.build,
                "day": _day(run.day),
                "row_count": run.row_count,
                "scout_finished_at": run.finished_at,
                "version": integration.version,
                "job_id": job.id,
                "reason": reason,
            }
        ),
    )
    await conn.execute(QUERIES["link_job_to_run"], job.id, row["id"])
    run_id: str = row["id"]
    return run_id


async def newer_applied(
    conn: asyncpg.Connection, integration: Integration, run: ScoutRun
) -> str | None:
    """The Scout id of a newer run applied already, which this one must not take back."""
    row = await conn.fetchrow(
        *QUERIES.bind(
            "newer_applied_run",
            integration_id=integration.id,
            finished_after=run.finished_at,
            build=run.build,
        )
    )
    return None if row is None else str(row[0])


async def plan(
    conn: asyncpg.Connection,
    run_id: str,
    target: str,
    mapped: list[MappedRow],
    ready: list[MappedRow],
    unit_ids: dict[str, str],
    size: int,
    newer: set[str] | None = None,
) -> list[Batch]:
    """The run's batches: as first cut when this run was tried before, else cut now. Keys in
    `newer` (a newer run wrote them) are left out of the batches planned before."""
    planned_keys: list[list[str]] | None = await conn.fetchval(QUERIES["run_plan"], run_id)
    if planned_keys:
        # Same batches under the same numbers; rows that became ready since go after them.
        left_out = newer or set()
        ok = {
            row.key: row
            for row in mapped
            if row.outcome == "ok" and row.key and row.key not in left_out
        }
        planned = {key for keys in planned_keys for key in keys}
        later = [row for row in ready if row.key not in planned]
        groups = [
            _batches.ordered([ok[key] for key in keys if key in ok], target, unit_ids)
            for keys in planned_keys
        ]
        groups += _batches.chunks(_batches.ordered(later, target, unit_ids), size)
    else:
        groups = _batches.chunks(_batches.ordered(ready, target, unit_ids), size)
    keys = [[row.key or "" for row, _ in group] for group in groups]
    await conn.execute(
        *QUERIES.bind("set_batches", run_id=run_id, batch_total=len(groups), plan=keys)
    )
    return groups


async def log_mapping(
    conn: asyncpg.Connection, integration: Integration, run_id: str, mapped: list[MappedRow]
) -> None:
    """The rows mapping held or found a problem in, in the run's row log (in a transaction)."""
    logged = [row for row in mapped if row.outcome in ("held", "problem")]
    await conn.execute(QUERIES["forget_mapping_rows"], run_id)
    if logged:
        await conn.execute(
            *QUERIES.bind(
                "log_mapping_rows",
                run_id=run_id,
                integration_id=integration.id,
                subject_kind=integration.target,
                positions=[row.position for row in logged],
                keys=[row.key or f"row {row.position}" for row in logged],
                hashes=[row.hash for row in logged],
                outcomes=[row.outcome for row in logged],
                reasons=[row.reason for row in logged],
            )
        )


async def finish(
    conn: asyncpg.Connection, run_id: str, status: str, reason: str | None, outcomes: Counter[str]
) -> None:
    """The run closed with its status and outcomes (in a transaction)."""
    await conn.execute(
        *QUERIES.bind(
            "finish_run", run_id=run_id, status=status, reason=reason, outcomes=dict(outcomes)
        )
    )
    if status in _NO_LONGER_PAUSED:
        await conn.execute(QUERIES["close_outdated_guards"], run_id)
        # A paused run this one overtook would end older if started: it says so, and no
        # screen offers Start for it any more.
        await conn.execute(QUERIES["overtake_paused_runs"], run_id)


def _day(day: str | None) -> date | None:
    try:
        return date.fromisoformat(day) if day else None
    except ValueError:
        return None
