"""Mapping and the fast path: Scout's rows become ours, and the rows written as they are
already stay behind.

Mapping is pure code, with the integration's lookups. A page Scout sends again byte for byte
whose rows the fast path would skip is not mapped again (_pages.py), except in a resumed run,
whose saved batches go again with their rows' whole values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg

from omnium_imports import _batches, _runs
from omnium_imports._keystate import KeyStateCache
from omnium_imports._runs import Integration
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappedRow, MappingContext
from omnium_imports.run._context import Context
from omnium_imports.run._fetch import Fetched

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Mapped:
    """Every row of the run as mapped, what clearing a field means for its mapping, and the
    integration's key state as this run found it."""

    rows: list[MappedRow]
    clearing: _batches.Clearing
    key_state: KeyStateCache


@dataclass(frozen=True, slots=True)
class Ready:
    """The ok rows to send, our ids of the units they name by code, and the keys a newer run
    wrote (with its Scout id), which are left as they are ("older")."""

    rows: list[MappedRow]
    unit_ids: dict[str, str]
    newer: dict[str, str] = field(default_factory=dict)


async def map_rows(ctx: Context, integration: Integration, run_id: str, fetched: Fetched) -> Mapped:
    """Scout's rows mapped to ours. Its pages are let go once mapped, before the batches."""

    async def state(conn: asyncpg.Connection) -> tuple[KeyStateCache, MappingContext, bool]:
        key_state = await ctx.key_state(conn, integration)
        resumed = await conn.fetchval(QUERIES["run_plan"], run_id) is not None
        return key_state, await _runs.mapping_context(conn, integration), resumed

    scout_run = fetched.scout_run
    key_state, context, resumed = await ctx.db(f"run {scout_run.id}: mapping", state)
    memory = ctx.page_memory(integration.id)
    skippable = None if resumed else key_state.skippable
    rows = _runs.paused_gc(
        lambda: memory.map(
            fetched.pages, fetched.version, integration.spec or {}, context, skippable
        )
    )
    fetched.pages.clear()  # Scout's rows are not needed once mapped
    if memory.reused:
        log.info(
            "run %s: %d of %d rows came from pages seen before and were not mapped again",
            scout_run.id,
            memory.reused,
            len(rows),
        )
    return Mapped(rows, _batches.Clearing.of(fetched.version), key_state)


async def fast_path(
    ctx: Context, integration: Integration, run_id: str, scout_run_id: str, mapped: Mapped
) -> Ready:
    """The rows whose key state says they are written as they are: not sent again. Nor are
    the keys a newer run wrote (a page run, say, while this one waited to resume): newer data
    wins, and those rows end `older`."""
    newer = dict(
        await ctx.db(
            f"run {scout_run_id}: newer runs",
            lambda conn: conn.fetch(QUERIES["keys_of_newer_runs"], integration.id, run_id),
        )
    )
    return await ready(
        ctx,
        integration,
        mapped.rows,
        f"run {scout_run_id}: mapping",
        mapped.key_state.skippable,
        newer,
    )


async def ready(
    ctx: Context,
    integration: Integration,
    rows: list[MappedRow],
    what: str,
    skippable: Callable[[str | None, bytes], bool] | None = None,
    newer: dict[str, str] | None = None,
) -> Ready:
    """The ok rows that go on (every one, when nothing is `skippable` or `newer`), with our
    ids of the units they name."""
    newer = newer or {}
    ok = [
        row
        for row in rows
        if row.outcome == "ok"
        and not (skippable is not None and skippable(row.key, row.hash))
        and row.key not in newer
    ]
    unit_ids = await ctx.db(what, lambda conn: _runs.unit_ids(conn, integration, ok))
    return Ready(ok, unit_ids, newer)
