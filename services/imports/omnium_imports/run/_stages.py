"""The agreed run, stage by stage: fetch, record, map, fast path, guards, batches, send,
settle, held rows, missing, close.

Each stage is a function that takes what the stages before it returned and returns what it
holds (`Fetched`, `Mapped`, `Ready`, `Checked`, `Planned`, `Sent`), or the run's end as a
`RunResult`: the order is in the types. Each stage runs in a span of its own, named as the
design names it, and inside the run's error handling: an error in any of them ends the run
failed, on record with its reason (and so with an alert), never left "Running".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from omnium_db import DATABASE_ERRORS
from omnium_imports._queue import Job
from omnium_imports._runs import Integration
from omnium_imports.run._close import close, held_rows, missing, settle_window
from omnium_imports.run._context import (
    Context,
    HandedOver,
    RunResult,
    failure_reason,
)
from omnium_imports.run._fetch import fetch, overtaken, record
from omnium_imports.run._guard import check
from omnium_imports.run._map import fast_path, map_rows
from omnium_imports.run._write import cut_batches, first_counts, send
from omnium_telemetry import tracer

if TYPE_CHECKING:
    from opentelemetry.trace import Span

# Not the end of a run: another copy continues it (handed over, or after the lease).
_NOT_AN_END: tuple[type[BaseException], ...] = (HandedOver, *DATABASE_ERRORS)


class _Trip:
    """Where a run is: the stage it is in, and what a failure there closes on record."""

    def __init__(self) -> None:
        self.stage = "fetch"
        self.run_id: str | None = None
        self.counted: dict[int, str] = {}

    @contextmanager
    def enter(self, stage: str) -> Iterator[Span]:
        """The stage's span: where a run spends its time."""
        self.stage = stage
        with tracer("omnium.imports").start_as_current_span(f"imports.{stage}") as span:
            yield span


def _ends(span: Span, result: RunResult) -> RunResult:
    span.set_attribute("omnium.run.status", result.status)
    return result


async def run_stages(ctx: Context, integration: Integration, job: Job) -> RunResult:
    """One job's run, stage by stage, until a stage ends it (close always does)."""
    trip = _Trip()
    try:
        return await _through(ctx, integration, job, trip)
    except _NOT_AN_END:
        # Another copy continues the run (handed over, or after the lease): not an end.
        raise
    except Exception as exc:
        reason = failure_reason(trip.run_id, trip.stage, exc)
        if trip.run_id is None:
            return RunResult("failed", reason=reason)
        outcomes = Counter(trip.counted.values())
        await ctx.finish(trip.run_id, "failed", reason, outcomes)
        return RunResult("failed", trip.run_id, reason, outcomes)


async def _through(ctx: Context, integration: Integration, job: Job, trip: _Trip) -> RunResult:
    with trip.enter("fetch") as span:
        fetched = await fetch(ctx, integration, job)
        if isinstance(fetched, RunResult):
            return _ends(span, fetched)
    scout_run = fetched.scout_run
    with trip.enter("record") as span:
        run_id = trip.run_id = await record(ctx, integration, job, scout_run)
        older = await overtaken(ctx, integration, scout_run, run_id)
        if older is not None:
            return _ends(span, older)
    with trip.enter("map"):
        mapped = await map_rows(ctx, integration, run_id, fetched)
    with trip.enter("fast_path"):
        ready = await fast_path(ctx, integration, run_id, scout_run.id, mapped)
    with trip.enter("guards") as span:
        checked = await check(ctx, integration, job, scout_run, run_id, mapped, ready)
        if isinstance(checked, RunResult):
            return _ends(span, checked)
    with trip.enter("batches"):
        counted = trip.counted = first_counts(mapped.rows, ready)
        planned = await cut_batches(ctx, integration, run_id, scout_run.id, mapped.rows, ready)
    with trip.enter("send"):
        sent = await send(ctx, integration, run_id, mapped, planned, counted)
    with trip.enter("settle_window"):
        await settle_window(ctx, integration, scout_run, mapped)
    with trip.enter("held_rows"):
        await held_rows(ctx, integration, scout_run, run_id, mapped, checked, sent)
    with trip.enter("missing"):
        await missing(ctx, integration, scout_run, run_id, mapped, checked, sent)
    with trip.enter("close") as span:
        return _ends(span, await close(ctx, run_id, planned, sent))
